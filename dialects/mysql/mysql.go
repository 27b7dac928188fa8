package mysql

import (
	"context"
	"database/sql"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/mysqldialect"
)

// New returns the MySQL/MariaDB (InnoDB) dialect. It is a stateless value,
// safe for concurrent use.
func New() dialects.Dialect { return mysqldialect.New() }

// NewTiDB returns the dialect's TiDB variant, for TiDB 6.5 and later. It
// differs from [New] where TiDB differs from InnoDB:
//   - the read-back after a duplicate key is SELECT … FOR UPDATE (TiDB's
//     shared locks are no-ops, and its 1062 leaves no lock behind);
//   - a claim (and each Sweep batch) in an optimistic transaction, or one
//     that checks unique keys only at COMMIT, is refused with an error
//     matching [dialects.ErrUnsuitableTx] that names the fix; bounded
//     transactions (txmiddleware.WithLockWait) and a tidb:// URL through
//     [DSN] set pessimistic transactions themselves;
//   - its lock-wait view reads TiDB's DATA_LOCK_WAITS and TIDB_TRX.
//
// Classify is the same for both. docs/scaling.md has the why of each.
func NewTiDB() dialects.Dialect { return mysqldialect.NewTiDB() }

// Querier is what [Detect] asks: *sql.DB, *sql.Conn and *sql.Tx satisfy
// it.
type Querier interface {
	// QueryRowContext runs a query that returns at most one row.
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Detect asks the server behind q for VERSION() and @@version_comment and
// returns the dialect for it: [NewTiDB] for TiDB, [New] for MySQL and
// MariaDB. (TiDB's server-version setting can make VERSION() look like
// MySQL's; its version comment still names TiDB.) A dialect holds no
// connection, so a program that does not know which server it will meet
// calls Detect once, after opening the pool, and then [Configure]. When the
// server cannot be asked, the error comes with the MySQL/MariaDB dialect.
func Detect(ctx context.Context, q Querier) (dialects.Dialect, error) {
	d, err := mysqldialect.Detect(ctx, q)
	return d, err
}

// SchemeDialect returns the dialect a DSN names: [NewTiDB] for a tidb://
// URL, [New] for a mysql:// or mariadb:// URL and for the driver's format.
// Only tidb:// names the server; behind any other DSN it may still be
// TiDB, which [Detect] finds out.
func SchemeDialect(dsn string) dialects.Dialect { return mysqldialect.SchemeDialect(dsn) }

// Configure adds to cfg the connection parameters d's server needs that
// cfg does not set, and reports whether it added any. For the TiDB dialect
// that is tidb_txn_mode = 'pessimistic' (see [NewTiDB]), which the driver
// sets on every connection it opens; for MySQL and MariaDB, and for a
// dialect that is not this package's, nothing. A parameter cfg already
// sets is left as it is. [Config] does it for a tidb:// URL; call it
// yourself after [Detect] found TiDB behind a mysql:// URL.
func Configure(d dialects.Dialect, cfg *gomysql.Config) bool {
	md, ok := d.(mysqldialect.Dialect)
	return ok && md.Configure(cfg)
}

// Config parses dsn into a go-sql-driver configuration with parseTime=true
// set (goose's version table has a TIMESTAMP column); every other option is
// left as given. dsn is either a URL,
//
//	mysql://user:password@host:port/dbname?param=value
//
// (scheme mysql, mariadb or tidb; the port defaults to 3306, or 4000 for
// tidb; user and password percent-encoded; a socket=/path parameter selects
// a Unix socket; other parameters are the driver's), or the driver's own
// format,
//
//	user:password@tcp(host:port)/dbname?param=value
//
// A tidb:// URL also gets what [NewTiDB] needs (tidb_txn_mode =
// 'pessimistic' unless it sets it); [SchemeDialect] gives the dialect a
// DSN names. A DSN whose password may not have parsed as one (an unencoded
// '@', a password=… parameter) is refused. The errors match [ErrBadDSN] and
// never contain the password. docs/mysql.md ("Connection strings") has the
// forms and rules.
func Config(dsn string) (*gomysql.Config, error) { return mysqldialect.Config(dsn) }

// DSN returns dsn (a mysql://, mariadb:// or tidb:// URL or a driver DSN,
// see [Config]) in go-sql-driver's format with parseTime=true (and, for
// tidb://, tidb_txn_mode='pessimistic'), for sql.Open("mysql", …).
func DSN(dsn string) (string, error) { return mysqldialect.DSN(dsn) }

var (
	// ErrBadDSN is returned (wrapped) by [DSN] and [Config] for a data
	// source name they cannot read. Its message never contains the
	// password.
	ErrBadDSN = mysqldialect.ErrBadDSN

	// ErrTiDBServer is matched (errors.Is) by the ledger's and
	// txmiddleware's error when the MySQL/MariaDB dialect ([New]) runs
	// against a TiDB server: TiDB refuses the read-back after a duplicate
	// key, a shared lock (LOCK IN SHARE MODE), with error 1235. The fix is
	// the TiDB variant: [NewTiDB], or [Detect] after opening the pool, or a
	// tidb:// URL through [DSN]. The driver's error stays reachable with
	// errors.As.
	ErrTiDBServer = mysqldialect.ErrTiDBServer
)

// Display returns dsn in a form safe to print: a URL without its password
// (user@host:port/db), with the scheme tidb:// for a tidb:// URL and
// mysql:// for every other. It returns "mysql://(invalid DSN)" for a DSN
// it cannot read.
func Display(dsn string) string { return mysqldialect.Display(dsn) }
