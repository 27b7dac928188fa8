package txmiddleware_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/pgdialect"
	"github.com/opledger/opledger/internal/testkit/poolertest"
	"github.com/opledger/opledger/internal/testkit/testdb"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/outbox"
	"github.com/opledger/opledger/txmiddleware"
)

// TestPgBouncerRunnerPaths: the database/sql Runner with pgx's driver in
// its default exec mode (cache_statement) behind PgBouncer in transaction
// mode, each statement of a keyed call meeting the pooler's error in turn
// (poolertest: the statement it prepared is gone from the server
// connection the next time): claim first the claim, the completion, the
// outbox's Enqueue and the work's own statement; at commit the record;
// and the runner's Lookup (a transport's resolve). Every error Run and
// Lookup return passes through the dialect: it matches
// postgres.ErrStatementPooling and names default_query_exec_mode, with
// the driver's *pgconn.PgError still reachable.
func TestPgBouncerRunnerPaths(t *testing.T) {
	t.Parallel()
	p := poolertest.New(t)
	d := pgdialect.New()
	// The table is partitioned by birth (migration 00005): the ledger
	// completes and looks up an entry by (id, born_at).
	q, rq, bq := d.Queries(p.Table), d.RecordQueries(p.Table), d.BirthQueries(p.Table)
	obq := d.OutboxQueries(outbox.TableFor(p.Table))
	ob, err := outbox.New(d, outbox.WithTable(outbox.TableFor(p.Table)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const check = "SELECT $1::text"
	work := func(ctx context.Context, tx *sql.Tx) (ledger.Result, error) {
		op, _ := ledger.OperationFromContext(ctx)
		key := fmt.Sprintf("%x", op.ID())
		if _, err := ob.Enqueue(ctx, tx, outbox.Message{Name: "Created", Topic: "payments.created", Key: key}); err != nil {
			return ledger.Result{}, err
		}
		if _, err := tx.ExecContext(ctx, check, key); err != nil {
			return ledger.Result{}, err
		}
		return ledger.Result{Response: []byte("ok")}, nil
	}
	claimReq := func(key string) ledger.ClaimRequest {
		return ledger.ClaimRequest{Identity: testdb.ID(t, "svc-a", "/pay.v1.Payments/Create", key), Fingerprint: ledger.FingerprintOf([]byte(key))}
	}
	run := func(r *txmiddleware.Runner, key string) error {
		out, err := r.Run(ctx, claimReq(key), work)
		if err != nil && out.Executed {
			t.Fatalf("%s: %+v with %v", key, out, err)
		}
		return err
	}
	lookup := func(r *txmiddleware.Runner, key string) error {
		_, err := r.Lookup(ctx, claimReq(key).Identity)
		if errors.Is(err, ledger.ErrNotFound) {
			err = nil
		}
		return err
	}
	atCommit := []txmiddleware.Option{txmiddleware.WithClaimAtCommit()}
	for _, c := range []struct {
		name   string
		forget string
		opts   []txmiddleware.Option
		call   func(r *txmiddleware.Runner, key string) error
	}{
		{"claim", q.Insert, nil, run},
		{"complete", bq.Complete + dialectkit.HourOfBirth(0), nil, run},
		{"enqueue", obq.Insert, nil, run},
		{"work", check, nil, run},
		{"record at commit", rq.Insert, atCommit, run},
		{"enqueue at commit", obq.Insert, atCommit, run},
		{"lookup", bq.Lookup + dialectkit.HourOfBirth(0), nil, lookup},
	} {
		t.Run(c.name, func(t *testing.T) {
			p.Reset(t)
			db := testdb.OpenDSN(t, "pgx", p.PgBouncer.DSN(), 1) // pgx's defaults
			s, err := ledger.New(d, ledger.WithTable(p.Table))
			if err != nil {
				t.Fatal(err)
			}
			r, err := txmiddleware.New(db, s, c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.call(r, c.name+"-1"); err != nil {
				t.Fatalf("warm-up: %v", err)
			}
			p.Forget(t, c.forget)
			poolertest.Want(t, c.call(r, c.name+"-2"), "26000")
		})
	}
}

// TestCommitPoolingError: database/sql's COMMIT is a simple query, which
// no pooler fails with a prepared statement's error, so what the Runner
// makes of such an error at COMMIT is checked with a driver whose COMMIT
// returns it, as lib/pq and pgx's driver would: in both orders the Run
// fails with an error matching postgres.ErrStatementPooling that names
// the setting, reaches the driver's error, and is no ErrCommitUnknown.
func TestCommitPoolingError(t *testing.T) {
	for _, drvErr := range []error{
		&pgconn.PgError{Severity: "ERROR", Code: "26000", Message: `prepared statement "stmtcache_0123" does not exist`},
		&pq.Error{Severity: "ERROR", Code: "26000", Message: `prepared statement "stmtcache_0123" does not exist`},
	} {
		for _, order := range []struct {
			name string
			opts []txmiddleware.Option
		}{{"claim first", nil}, {"claim at commit", []txmiddleware.Option{txmiddleware.WithClaimAtCommit()}}} {
			t.Run(typeName(drvErr)+"/"+order.name, func(t *testing.T) {
				db := sql.OpenDB(commitFails{drvErr})
				defer db.Close()
				r, err := txmiddleware.New(db, acquiring{}, order.opts...)
				if err != nil {
					t.Fatal(err)
				}
				id, err := ledger.NewIdentity("svc-a", "/pay.v1.Payments/Create", "k")
				if err != nil {
					t.Fatal(err)
				}
				out, err := r.Run(context.Background(), ledger.ClaimRequest{Identity: id, Fingerprint: ledger.FingerprintOf([]byte("k"))},
					func(context.Context, *sql.Tx) (ledger.Result, error) {
						return ledger.Result{Response: []byte("ok")}, nil
					})
				if out.Executed {
					t.Fatalf("%+v: executed, with COMMIT refused", out)
				}
				if !errors.As(err, new(*ledger.DBError)) {
					t.Fatalf("%v (%T): no *ledger.DBError", err, err)
				}
				switch e := drvErr.(type) {
				case *pgconn.PgError:
					if !errors.As(err, &e) {
						t.Fatalf("%v: the driver's *pgconn.PgError is not reachable", err)
					}
				case *pq.Error:
					if !errors.As(err, &e) {
						t.Fatalf("%v: the driver's *pq.Error is not reachable", err)
					}
				}
				if !errors.Is(err, pgdialect.ErrStatementPooling) || !strings.Contains(err.Error(), "default_query_exec_mode=exec") ||
					errors.Is(err, txmiddleware.ErrCommitUnknown) {
					t.Fatalf("%v: want ErrStatementPooling naming default_query_exec_mode=exec, not ErrCommitUnknown", err)
				}
				t.Logf("%v", err)
			})
		}
	}
}

func typeName(v any) string {
	switch v.(type) {
	case *pgconn.PgError:
		return "pgconn.PgError"
	case *pq.Error:
		return "pq.Error"
	}
	return "error"
}

// acquiring is a ledger on PostgreSQL that acquires (and records) every
// identity without a statement: the Runner then only begins and commits.
type acquiring struct{}

func (acquiring) Claim(_ context.Context, tx *sql.Tx, req ledger.ClaimRequest) (*ledger.Claim, error) {
	return ledger.NewAcquired(req.Identity, tx), nil
}

func (acquiring) Complete(context.Context, *sql.Tx, *ledger.Claim, ledger.Result) error { return nil }

func (acquiring) Record(_ context.Context, tx *sql.Tx, req ledger.ClaimRequest, _ ledger.Result) (*ledger.Claim, error) {
	return ledger.NewRecorded(req.Identity, tx), nil
}

func (acquiring) Lookup(context.Context, ledger.Querier, ledger.Identity) (*ledger.Entry, error) {
	return nil, ledger.ErrNotFound
}

func (acquiring) Dialect() dialects.Dialect { return pgdialect.New() }

// commitFails is a database/sql connector whose transactions begin and
// roll back, and whose COMMIT fails with err.
type commitFails struct{ err error }

func (c commitFails) Connect(context.Context) (driver.Conn, error) { return commitFailsConn(c), nil }
func (c commitFails) Driver() driver.Driver                        { return commitFailsDriver(c) }

type commitFailsDriver commitFails

func (d commitFailsDriver) Open(string) (driver.Conn, error) { return commitFailsConn(d), nil }

type commitFailsConn commitFails

func (commitFailsConn) Prepare(string) (driver.Stmt, error) {
	return nil, errors.New("commitFails: no statements")
}
func (commitFailsConn) Close() error                { return nil }
func (c commitFailsConn) Begin() (driver.Tx, error) { return commitFailsTx(c), nil }

type commitFailsTx commitFails

func (t commitFailsTx) Commit() error { return t.err }
func (commitFailsTx) Rollback() error { return nil }
