// Package pgxledger is the operation ledger and its transaction runner on
// pgx: the same ledger as package ledger's Store (its table, migrations,
// SQL and outcomes) for code that holds a pgx.Tx, and the same runner as
// txmiddleware's, pipelined. Create a [Store] with [New], and a [Runner]
// over a *pgxpool.Pool with [NewRunner].
//
// The Store claims, completes and records in the caller's pgx.Tx, one
// statement each, and adds pipelined forms for code that manages its
// transactions itself ([Store.BeginClaim], [Store.CompleteCommit]): the
// claim sent with BEGIN, the completion with COMMIT, one round trip each.
// The Runner takes txmiddleware's options and runs claim, work and
// completion as one transaction at the round trips of the bare
// transaction. [Transactions] plugs both into every transport of the kit
// (grpcint.NewServerFor, httpint.NewFor), and [Enqueue] writes an outbox
// message in a pgx.Tx. See docs/pgx.md.
package pgxledger
