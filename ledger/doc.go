// Package ledger is the durable operation ledger: it makes a keyed
// mutation take effect once, however often it is retried. Create a
// [Store] with [New].
//
// A service claims the operation's [Identity] inside the same *sql.Tx that
// holds its business write, so the claim and the write commit or roll back
// together:
//
//	tx, err := db.BeginTx(ctx, nil)
//	...
//	c, err := l.Claim(ctx, tx, ledger.ClaimRequest{Identity: id, Fingerprint: fp})
//	switch {
//	case errors.Is(err, ledger.ErrKeyReused): // the key was used for another request
//	case err != nil: // ErrInProgress, ErrRetryable, …
//	case c.Acquired():
//		// do the mutation with tx, then record its result
//		err = l.Complete(ctx, tx, c, ledger.Result{Response: resp, TypeName: "pkg.Resp"})
//	default:
//		// a replay: return c.Result, do nothing
//	}
//	err = tx.Commit()
//
// The claim inserts first and reads only on conflict, against a unique
// constraint on the identity; it never reads-then-inserts, and it never
// opens a transaction or connection of its own. Identity is the caller's
// fingerprint, the method (a full gRPC method name, or an HTTP method and
// route pattern: see [NewIdentity]) and the SHA-256 of the caller's key;
// the raw key is never stored. A key reused with a different request
// fingerprint is [ErrKeyReused], never a replay.
//
// The ledger knows nothing of gRPC: result codes are plain integers. SQL
// text and error classification come from a dialect (see package
// dialects); the table comes from package migrations.
//
// # Other transaction APIs
//
// [Store] is the ledger over *sql.Tx: one implementation, generic over
// the transaction type inside the kit, serves every transaction API.
// Package pgxledger's Store is the same ledger over pgx.Tx, and adds the
// pipelined forms (BeginClaim, CompleteCommit, RecordCommit), which send
// the claim with BEGIN and the completion or the record with COMMIT.
// Every call that needs the caller's transaction takes one (*sql.Tx,
// pgx.Tx), never a pool or a connection.
//
// # Implementing Ledger
//
// [Store] is the kit's implementation. Anyone may implement [Ledger]
// elsewhere (over another schema, or wrapping a Store to add metrics): the
// kit's txmiddleware, grpcint and conformance packages depend only on the
// interface. An implementation returns claims built with [NewAcquired] and
// [NewReplay], and accepts in Complete only a claim it returned for the
// same transaction (see [Claim.Tx]). Claim at commit (txmiddleware's
// WithClaimAtCommit) needs a Record method as well, with [Store.Record]'s
// signature, which returns [NewRecorded] or [NewReplay]. A ledger may
// also have BoundsLockWait() bool, reporting whether it honours
// [ClaimRequest].LockWait, and MaxResultSize() int, its result limit:
// the kit asks for both. The conformance suite is the
// contract: an implementation is correct when it passes it on the
// databases it is used with, in each order it is used in.
package ledger
