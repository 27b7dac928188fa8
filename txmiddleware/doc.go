// Package txmiddleware runs a keyed mutation as one transaction: claim the
// operation's identity in the ledger, run the caller's work, record its
// result, commit. A retry of the same request replays the recorded result
// instead of running the work again. Create a [Runner] with [New].
//
//	r, err := txmiddleware.New(db, store, txmiddleware.WithLockWait(2*time.Second))
//	...
//	out, err := r.Run(ctx, ledger.ClaimRequest{Identity: id, Fingerprint: fp},
//		func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
//			// the business write, in tx
//			return ledger.Result{Response: resp, TypeName: "pay.v1.TransferResponse"}, nil
//		})
//	// out.Executed or out.Replayed; out.Result; out.Attempts
//
// What the work returns decides what is recorded:
//   - a result: recorded and committed with the work's writes;
//   - a final error, as the [ErrorCodec] given with [WithErrorCodec]
//     decides (grpcint's codec: a gRPC status with code InvalidArgument,
//     FailedPrecondition, OutOfRange, NotFound, AlreadyExists or
//     PermissionDenied): the work's transaction is rolled back whole, the
//     error's encoding is recorded and committed in a fresh transaction,
//     and every retry gets the same error back (the work runs once; no
//     savepoint is taken on any path);
//   - any other error: the whole transaction rolls back, nothing is
//     recorded, and a retry runs the work again.
//
// The package knows nothing of gRPC or HTTP: the codec is the transport's.
//
// Transient database failures (serialization failure, deadlock, a
// connection lost before COMMIT) run the whole unit again, a bounded
// number of times with jittered backoff that never sleeps past the
// context's deadline. The work can therefore run more than once before one
// run commits: keep its side effects inside the transaction.
//
// A duplicate that arrives while another transaction holds the identity
// waits, at most the configured bound ([WithLockWait]), then fails with an
// error matching ledger.ErrInProgress. A connection that breaks during
// COMMIT gives [ErrCommitUnknown]: resolve (ledger Lookup, or a retry with
// the same key) before running anything again.
//
// On SQLite, open the pool with the sqlite dialect's DSN (immediate
// transactions and a busy timeout). See docs/txmiddleware.md.
//
// [Runner] is the runner over database/sql; package pgxledger's Runner is
// the same runner over pgx, pipelined.
package txmiddleware
