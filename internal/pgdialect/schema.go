package pgdialect

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"strconv"
	"sync"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

var (
	_ dialects.Schema      = Dialect{}
	_ dialectkit.Described = Dialect{}
	_ dialectkit.Sessions  = Dialect{}
)

// Migrations returns the ledger's PostgreSQL migrations, run under a
// session advisory lock with the kit's own id (0x6f706c6564676572,
// "opledger"), distinct from goose's default, waited for up to five
// minutes.
func (Dialect) Migrations() dialects.Migrations {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // the embedded folder always exists
	}
	return dialects.Migrations{
		FS:    sub,
		Goose: "postgres",
		Lock:  func(string) dialects.SessionLocker { return &advisoryLock{} },
	}
}

// lockID is the advisory lock the kit's migrations take ("opledger" in
// ASCII), distinct from goose's default, so the kit's migrations never
// wait on the application's.
const lockID int64 = 0x6f706c6564676572

// Lock timing: wait in steps of one second (the server's lock_timeout),
// for five minutes in all, as a migration of another process normally
// takes well under a second.
const (
	lockStep    = time.Second
	lockTimeout = 5 * time.Minute
)

// advisoryLock is a session-level advisory lock with the kit's id. A
// session that dies releases it. It remembers the backend that holds it,
// so that a pooler in transaction mode, which moves the next statement to
// another backend, is caught (ErrTransactionPooling) instead of leaving
// the migration unprotected.
type advisoryLock struct {
	mu   sync.Mutex
	held map[*sql.Conn]int64 // the backend holding the lock, per connection that took it
	// lockSQL takes the lock ($1 the lock's id); "" is pg_advisory_lock.
	// Tests set it to make a grant race a lock timeout.
	lockSQL string
}

// SessionLock takes the advisory lock on conn: pg_advisory_lock in a
// transaction whose lock_timeout is one second, so that the server either
// grants it or gives up, and never a cancelled statement leaves the lock
// granted without the caller knowing (a grant that races the timeout is
// read back and kept: tryAdvisoryLock). It tries again for five minutes in
// all, or until ctx ends; it is granted as soon as the holder releases it.
// Once granted, it checks that conn's next statement runs on the backend
// that holds the lock; when it does not (a pooler in transaction mode), it
// ends that backend, which releases the lock, and returns an error
// matching ErrTransactionPooling. It also refuses, with the same error, a
// session that holds the lock already (advisory locks are re-entrant:
// behind a pooler, the session of another client that is migrating).
func (l *advisoryLock) SessionLock(ctx context.Context, conn *sql.Conn) error {
	deadline := time.Now().Add(lockTimeout)
	wctx := context.WithoutCancel(ctx) // see above: never cancel mid-grant
	for {
		pid, err := l.tryAdvisoryLock(wctx, conn)
		if err == nil {
			return l.record(wctx, conn, pid)
		}
		if classifyStateOf(err) != dialects.ClassLockTimeout {
			return fmt.Errorf("postgres: migration lock: %w", err)
		}
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("postgres: migration lock: %w", cerr)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres: migration lock not granted within %v (another process is migrating an opledger table)", lockTimeout)
		}
	}
}

// record records that backend pid holds the lock for conn, after checking
// that conn still runs on it.
func (l *advisoryLock) record(ctx context.Context, conn *sql.Conn, pid int64) error {
	var now int64
	if err := conn.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&now); err != nil {
		releaseElsewhere(ctx, conn, pid)
		return fmt.Errorf("postgres: migration lock: %w", err)
	}
	if now != pid {
		releaseElsewhere(ctx, conn, pid)
		return fmt.Errorf("postgres: migration lock: taken by backend %d, the next statement ran on backend %d: %w", pid, now, ErrTransactionPooling)
	}
	l.mu.Lock()
	if l.held == nil {
		l.held = map[*sql.Conn]int64{}
	}
	l.held[conn] = pid
	l.mu.Unlock()
	return nil
}

// releaseElsewhere releases the lock that backend pid holds but conn no
// longer runs on, by ending that backend (pg_terminate_backend: a pooler
// drops the server connection and opens another). Best effort: a backend
// the user may not signal keeps the lock until the pooler closes it.
func releaseElsewhere(ctx context.Context, conn *sql.Conn, pid int64) {
	_, _ = conn.ExecContext(ctx, "SELECT pg_terminate_backend("+strconv.FormatInt(pid, 10)+")")
}

// heldByMeSQL returns the backend's pid and whether it already holds the
// kit's advisory lock (pg_locks shows a bigint key as classid, the high 32
// bits, and objid, the low 32 bits, with objsubid 1).
const heldByMeSQL = "SELECT pg_backend_pid(), EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' " +
	"AND pid = pg_backend_pid() AND granted AND classid = " + lockHigh + " AND objid = " + lockLow + " AND objsubid = 1)"

// lockID's high and low 32 bits, in decimal, as pg_locks shows them.
const (
	lockHigh = "1869638757" // 0x6f706c65
	lockLow  = "1684497778" // 0x64676572
)

// tryAdvisoryLock waits at most lockStep for the lock and returns the
// backend that took it. The wait runs under a savepoint: when lock_timeout
// fires just as the holder releases the lock, PostgreSQL may grant the
// lock and still raise the timeout (the grant is kept in the error's
// cleanup), and a session lock outlives the transaction's rollback. So
// after a lock timeout it asks, in the same transaction and so on the same
// backend, whether the session holds the lock now, and takes it as granted
// when it does.
func (l *advisoryLock) tryAdvisoryLock(ctx context.Context, conn *sql.Conn) (int64, error) {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, "SET LOCAL lock_timeout = "+strconv.FormatInt(lockStep.Milliseconds(), 10)); err != nil {
		_ = tx.Rollback()
		return 0, err
	}
	pid, already, err := heldByMe(ctx, tx)
	if err != nil {
		_ = tx.Rollback()
		return 0, err
	}
	if already {
		// Advisory locks are re-entrant: taking it again would succeed and
		// protect nothing. A session never holds it before SessionLock
		// unless a pooler gave this client another client's session.
		_ = tx.Rollback()
		return 0, fmt.Errorf("backend %d already holds the lock, for another client: %w", pid, ErrTransactionPooling)
	}
	if _, err := tx.ExecContext(ctx, "SAVEPOINT opledger_lock"); err != nil {
		_ = tx.Rollback()
		return 0, err
	}
	lockSQL := l.lockSQL
	if lockSQL == "" {
		lockSQL = "SELECT pg_advisory_lock($1)"
	}
	if _, err := tx.ExecContext(ctx, lockSQL, lockID); err != nil {
		if classifyStateOf(err) == dialects.ClassLockTimeout && grantedMeanwhile(ctx, tx) {
			// The session lock outlives the transaction.
			return pid, tx.Commit()
		}
		_ = tx.Rollback()
		return 0, err
	}
	// The session lock outlives the transaction.
	return pid, tx.Commit()
}

// heldByMe returns tx's backend and whether it holds the kit's lock.
func heldByMe(ctx context.Context, tx *sql.Tx) (pid int64, held bool, err error) {
	err = tx.QueryRowContext(ctx, heldByMeSQL).Scan(&pid, &held)
	return pid, held, err
}

// grantedMeanwhile reports whether the lock, whose wait in tx has just
// ended with a lock timeout, was granted all the same. False when that
// cannot be read: the caller then treats the timeout as one.
func grantedMeanwhile(ctx context.Context, tx *sql.Tx) bool {
	if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT opledger_lock"); err != nil {
		return false
	}
	_, held, err := heldByMe(ctx, tx)
	return err == nil && held
}

// classifyStateOf classifies err by its SQLSTATE.
func classifyStateOf(err error) dialects.Class { return Dialect{}.Classify(err) }

// SessionUnlock releases the advisory lock on conn. When conn runs on
// another backend than the one that took the lock (a pooler in transaction
// mode), it ends that backend and returns an error matching
// ErrTransactionPooling.
func (l *advisoryLock) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	l.mu.Lock()
	pid := l.held[conn]
	delete(l.held, conn)
	l.mu.Unlock()
	var released bool
	var now int64
	if err := conn.QueryRowContext(ctx, "SELECT pg_advisory_unlock($1), pg_backend_pid()", lockID).Scan(&released, &now); err != nil {
		return fmt.Errorf("postgres: migration unlock: %w", err)
	}
	if pid != 0 && now != pid {
		releaseElsewhere(ctx, conn, pid)
		return fmt.Errorf("postgres: migration unlock: the lock is held by backend %d, the statement ran on backend %d: %w", pid, now, ErrTransactionPooling)
	}
	if !released {
		return fmt.Errorf("postgres: migration unlock: the lock was not held by this session")
	}
	return nil
}

// Traits: READ COMMITTED (the default), REPEATABLE READ and SERIALIZABLE.
func (Dialect) Traits() dialectkit.Traits {
	return dialectkit.Traits{IsolationLevels: []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable}}
}

// SessionID returns the backend's pid (pg_backend_pid()).
func (Dialect) SessionID(ctx context.Context, tx *sql.Tx) (int64, error) {
	var id int64
	err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&id)
	return id, err
}

// BlockedBy counts the backends whose lock waits pg_blocking_pids
// attributes to backend id.
func (Dialect) BlockedBy(ctx context.Context, db *sql.DB, id int64) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))", id).Scan(&n)
	return n, err
}

// Kill terminates backend id with pg_terminate_backend (the user needs
// pg_signal_backend or to own the session).
func (Dialect) Kill(ctx context.Context, db *sql.DB, id int64) error {
	var ok bool
	if err := db.QueryRowContext(ctx, "SELECT pg_terminate_backend($1::int)", id).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("postgres: pg_terminate_backend(%d) found no such backend", id)
	}
	return nil
}
