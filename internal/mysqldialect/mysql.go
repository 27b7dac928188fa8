// Package mysqldialect is the kit's MySQL, MariaDB and TiDB dialect,
// which dialects/mysql returns (mysql.New, mysql.NewTiDB); its package doc
// describes the SQL. The kit's own code uses this package where it needs
// the concrete type and its optional interfaces (internal/dialectkit).
package mysqldialect

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
)

// Dialect is the MySQL/MariaDB dialect, or its TiDB variant ([NewTiDB]).
// The zero value is the MySQL/MariaDB dialect, ready to use. Dialect values
// are comparable: New() == Dialect{}.
type Dialect struct {
	tidb bool
}

var (
	_ dialects.Dialect         = Dialect{}
	_ dialectkit.TxChecker     = Dialect{}
	_ dialectkit.RecordQuerier = Dialect{}
)

// New returns the MySQL/MariaDB (InnoDB) dialect.
func New() Dialect { return Dialect{} }

// NewTiDB returns the dialect's TiDB variant, for TiDB 6.5 and later. It
// differs from [New] where TiDB differs from InnoDB:
//   - the read-back after a duplicate key is SELECT … FOR UPDATE (TiDB's
//     shared locks are no-ops, and its 1062 leaves no lock behind);
//   - it implements [dialectkit.TxChecker]: a claim (and each Sweep batch)
//     in an optimistic transaction, or one that checks unique keys only at
//     COMMIT, is refused with an error matching [dialects.ErrUnsuitableTx]
//     that names the fix; BeginBounded and a tidb:// URL through [DSN] set
//     pessimistic transactions themselves;
//   - its lock-wait view ([Dialect.BlockedBy]) reads TiDB's
//     DATA_LOCK_WAITS and TIDB_TRX.
//
// Classify is the same for both. docs/scaling.md has the why of each.
func NewTiDB() Dialect { return Dialect{tidb: true} }

// TiDB reports whether d is the TiDB variant.
func (d Dialect) TiDB() bool { return d.tidb }

// Name returns "mysql", or "tidb" for the TiDB variant.
func (d Dialect) Name() string {
	if d.tidb {
		return "tidb"
	}
	return "mysql"
}

// Placeholder returns "?".
func (Dialect) Placeholder(int) string { return "?" }

// QuoteIdent quotes name with backticks.
func (Dialect) QuoteIdent(name string) string {
	return "`" + strings.ReplaceAll(name, "`", "``") + "`"
}

const columns = `request_fp, code, response, response_type, created_at, completed_at, expires_at`

// Queries returns the ledger's SQL for table.
func (d Dialect) Queries(table string) dialects.Queries {
	t := d.QuoteIdent(table)
	return dialects.Queries{
		Insert: `INSERT INTO ` + t + ` (id, caller, method, request_fp, created_at, expires_at, born_at) ` +
			`VALUES (?, ?, ?, ?, ?, ?, ?)`,
		Select: `SELECT ` + columns + ` FROM ` + t + ` WHERE id = ? ` + d.readBackLock(),
		TakeOver: `UPDATE ` + t + ` SET request_fp = ?, created_at = ?, expires_at = ?, ` +
			`code = NULL, response = NULL, response_type = NULL, completed_at = NULL ` +
			`WHERE id = ? AND expires_at <= ?`,
		Complete: `UPDATE ` + t + ` SET code = ?, response = ?, response_type = ?, completed_at = ? ` +
			`WHERE id = ? AND completed_at IS NULL`,
		Lookup: `SELECT ` + columns + ` FROM ` + t + ` WHERE id = ?`,
		// Oldest first through the expires_at index; each batch is its own
		// statement, so no lock is held longer than one batch.
		Sweep:        `DELETE FROM ` + t + ` WHERE expires_at <= ? ORDER BY expires_at LIMIT ?`,
		CountExpired: `SELECT COUNT(*) FROM ` + t + ` WHERE expires_at <= ?`,
		// Entry by entry after the batch waited too long on a held row:
		// a plain (consistent, non-locking) read of the candidates, then
		// one DELETE each by primary key, which waits only on its own row.
		SweepScan: `SELECT id FROM ` + t + ` WHERE expires_at <= ? ORDER BY expires_at LIMIT ?`,
		SweepOne:  `DELETE FROM ` + t + ` WHERE id = ? AND expires_at <= ?`,
	}
}

// RecordQueries returns the SQL of the ledger's Record for table: a plain
// INSERT of the completed entry, which on a duplicate waits for an
// uncommitted holder and fails with 1062 (the statement alone rolls back)
// once the holder commits, or ends in deadlock 1213 when InnoDB picks it
// as the victim among several waiters. An expired entry is taken over by a
// second statement, TakeOver, after the read-back: ON DUPLICATE KEY UPDATE
// would do it in one, but its affected-rows count cannot tell "inserted"
// from "existed" when the DSN has clientFoundRows=true. The same holds for
// the TiDB variant.
func (d Dialect) RecordQueries(table string) dialectkit.RecordQueries {
	t := d.QuoteIdent(table)
	return dialectkit.RecordQueries{
		Insert: `INSERT INTO ` + t + ` (id, caller, method, request_fp, code, response, response_type, created_at, completed_at, expires_at, born_at) ` +
			`VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		TakeOver: `UPDATE ` + t + ` SET request_fp = ?, code = ?, response = ?, response_type = ?, ` +
			`created_at = ?, completed_at = ?, expires_at = ? WHERE id = ? AND expires_at <= ?`,
	}
}

// readBackLock is the locking clause of the read-back after a conflict:
// LOCK IN SHARE MODE on InnoDB, FOR UPDATE on TiDB (see NewTiDB).
func (d Dialect) readBackLock() string {
	if d.tidb {
		return "FOR UPDATE"
	}
	return "LOCK IN SHARE MODE"
}

// MySQL, MariaDB and TiDB error numbers the dialect distinguishes.
const (
	erDupEntry            = 1062 // ER_DUP_ENTRY
	erDupEntryWithKeyName = 1586 // ER_DUP_ENTRY_WITH_KEY_NAME
	erLockWaitTimeout     = 1205 // ER_LOCK_WAIT_TIMEOUT
	erLockDeadlock        = 1213 // ER_LOCK_DEADLOCK
	erLockNowait          = 3572 // ER_LOCK_NOWAIT (MySQL 8 NOWAIT)
	erQueryTimeout        = 3024 // ER_QUERY_TIMEOUT (MySQL max_execution_time)
	erStatementTimeout    = 1969 // ER_STATEMENT_TIMEOUT (MariaDB max_statement_time)
	erServerShutdown      = 1053 // ER_SERVER_SHUTDOWN
	erAbortingConnection  = 1152 // ER_ABORTING_CONNECTION
	erNetReadError        = 1158 // ER_NET_READ_ERROR
	erNetReadInterrupted  = 1159 // ER_NET_READ_INTERRUPTED
	erNetErrorOnWrite     = 1160 // ER_NET_ERROR_ON_WRITE
	erNetWriteInterrupted = 1161 // ER_NET_WRITE_INTERRUPTED
	erConnectionKilled    = 1927 // ER_CONNECTION_KILLED (MariaDB)
	erClientTimeout       = 4031 // ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8.0.24+)
	crServerGone          = 2006 // CR_SERVER_GONE_ERROR
	crServerLost          = 2013 // CR_SERVER_LOST
	erUnknownError        = 1105 // ER_UNKNOWN_ERROR (TiDB: "execution result undetermined")

	// TiDB's own codes (pkg/errno in TiDB's source).
	tidbForUpdateCantRetry  = 8002 // ErrForUpdateCantRetry
	tidbWriteConflictInTiDB = 8005 // ErrWriteConflictInTiDB: txnStartTS is stale
	tidbTxnRetryable        = 8022 // ErrTxnRetryable: KV error safe to retry
	tidbInfoSchemaExpired   = 8027 // ErrInfoSchemaExpired
	tidbInfoSchemaChanged   = 8028 // ErrInfoSchemaChanged: a DDL ran during the transaction
	tidbResolveLockTimeout  = 9004 // ErrResolveLockTimeout: waited on another transaction's lock
	tidbWriteConflict       = 9007 // ErrWriteConflict
)

// tidbUndetermined is the message of TiDB's ErrResultUndetermined, sent
// with code 1105 when TiDB cannot tell whether a COMMIT took effect (it
// then closes the connection). tidbLockRetryLimit is the message, with
// code 1105, of a pessimistic lock that TiDB gave up taking after
// retrying it against other transactions' writes as often as it may
// (GET_LOCK under contention answers it too, instead of 0).
const (
	tidbUndetermined   = "result undetermined"
	tidbLockRetryLimit = "pessimistic lock retry limit reached"
)

// Classify maps MySQL error numbers: 1062 and 1586 unique violation; 1213
// deadlock; 1205 lock wait timeout, 3572 NOWAIT, the statement timeouts
// 3024 (MySQL) and 1969 (MariaDB) and TiDB's 9004 (resolve lock timeout)
// lock timeout; TiDB's write conflicts and retryable aborts (9007, 8005,
// 8002, 8022, 8027, 8028), TiDB's "pessimistic lock retry limit reached"
// (1105) and any other SQLSTATE 40001 serialization failure; 1053, 1152, 1158–1161, 1927, 2006, 2013, 4031, SQLSTATE class 08
// and TiDB's "execution result undetermined" (1105) connection failures;
// and the driver's broken-connection errors (driver.ErrBadConn,
// mysql.ErrInvalidConn, network errors) as connection failures.
func (Dialect) Classify(err error) dialects.Class {
	if err == nil {
		return dialects.ClassOther
	}
	var me *gomysql.MySQLError
	if errors.As(err, &me) && me != nil {
		if me.Number == erUnknownError && strings.Contains(me.Message, tidbUndetermined) {
			return dialects.ClassConnection
		}
		if me.Number == erUnknownError && strings.Contains(me.Message, tidbLockRetryLimit) {
			return dialects.ClassSerialization
		}
		return classifyNumber(me.Number, string(me.SQLState[:]))
	}
	if errors.Is(err, gomysql.ErrInvalidConn) || errors.Is(err, gomysql.ErrPktSync) || errors.Is(err, gomysql.ErrPktSyncMul) {
		return dialects.ClassConnection
	}
	return dialectkit.ClassifyConnection(err)
}

func classifyNumber(n uint16, state string) dialects.Class {
	switch n {
	case erDupEntry, erDupEntryWithKeyName:
		return dialects.ClassUniqueViolation
	case erLockDeadlock:
		return dialects.ClassDeadlock
	case erLockWaitTimeout, erLockNowait, erQueryTimeout, erStatementTimeout, tidbResolveLockTimeout:
		return dialects.ClassLockTimeout
	case tidbWriteConflict, tidbWriteConflictInTiDB, tidbForUpdateCantRetry, tidbTxnRetryable,
		tidbInfoSchemaExpired, tidbInfoSchemaChanged:
		return dialects.ClassSerialization
	case erServerShutdown, erAbortingConnection, erNetReadError, erNetReadInterrupted,
		erNetErrorOnWrite, erNetWriteInterrupted, erConnectionKilled, erClientTimeout,
		crServerGone, crServerLost:
		return dialects.ClassConnection
	}
	switch {
	case state == "40001":
		return dialects.ClassSerialization
	case strings.HasPrefix(state, "08"):
		return dialects.ClassConnection
	}
	return dialects.ClassOther
}

// ErrBadDSN is returned (wrapped) by [DSN] and [Config] for a data source
// name they cannot read. Its message never contains the password.
var ErrBadDSN = errors.New("mysql: invalid DSN")

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
func Config(dsn string) (*gomysql.Config, error) {
	dsn = strings.TrimSpace(dsn)
	if dsn == "" {
		return nil, fmt.Errorf("%w: empty", ErrBadDSN)
	}
	var (
		cfg *gomysql.Config
		err error
	)
	if scheme, ok := urlScheme(dsn); ok {
		cfg, err = fromURL(dsn, scheme)
	} else {
		// The driver takes the password to end at the last '@' before the
		// last '/'. An '@' after it (which the driver's format wants
		// escaped, %40, in the database name and the parameters) is most
		// likely a password's: /x:pw@host parses as database "x:pw@host",
		// which Display would print.
		if at, slash := strings.LastIndexByte(dsn, '@'), strings.LastIndexByte(dsn, '/'); slash >= 0 && at > slash {
			return nil, fmt.Errorf("%w: an '@' after the last '/' (escape it as %%40 in the database name and the parameters)", ErrBadDSN)
		}
		cfg, err = gomysql.ParseDSN(dsn)
		if err != nil {
			err = fmt.Errorf("%w: %s", ErrBadDSN, redactString(err.Error(), dsn))
		}
	}
	if err != nil {
		return nil, err
	}
	for k := range cfg.Params {
		if strings.EqualFold(k, "password") {
			// Unknown parameters are system variables to the driver.
			return nil, fmt.Errorf("%w: a password parameter (the driver has none, and would run SET password=…): "+
				"give the password before the '@'", ErrBadDSN)
		}
	}
	cfg.ParseTime = true
	if scheme, ok := urlScheme(dsn); ok && scheme == "tidb" {
		NewTiDB().Configure(cfg)
	}
	return cfg, nil
}

// urlScheme returns the lower-case scheme of a mysql://, mariadb:// or
// tidb:// URL.
func urlScheme(dsn string) (string, bool) {
	scheme, _, ok := strings.Cut(dsn, "://")
	if !ok {
		return "", false
	}
	scheme = strings.ToLower(scheme)
	switch scheme {
	case "mysql", "mariadb", "tidb":
		return scheme, true
	}
	return "", false
}

// SchemeDialect returns the dialect a DSN names: [NewTiDB] for a tidb://
// URL, [New] for a mysql:// or mariadb:// URL and for the driver's format.
// Only tidb:// names the server; behind any other DSN it may still be
// TiDB, which [Detect] finds out.
func SchemeDialect(dsn string) Dialect {
	if scheme, ok := urlScheme(strings.TrimSpace(dsn)); ok && scheme == "tidb" {
		return NewTiDB()
	}
	return New()
}

// DSN returns dsn (a mysql://, mariadb:// or tidb:// URL or a driver DSN,
// see [Config]) in go-sql-driver's format with parseTime=true (and, for
// tidb://, tidb_txn_mode='pessimistic'), for sql.Open("mysql", …).
func DSN(dsn string) (string, error) {
	cfg, err := Config(dsn)
	if err != nil {
		return "", err
	}
	return cfg.FormatDSN(), nil
}

// Display returns dsn in a form safe to print: a URL without its password
// (user@host:port/db), with the scheme tidb:// for a tidb:// URL and
// mysql:// for every other. It returns "mysql://(invalid DSN)" for a DSN
// it cannot read.
func Display(dsn string) string {
	cfg, err := Config(dsn)
	if err != nil {
		return "mysql://(invalid DSN)"
	}
	var b strings.Builder
	b.WriteString(SchemeDialect(dsn).Name() + "://")
	if cfg.User != "" {
		b.WriteString(url.User(cfg.User).String())
		if cfg.Passwd != "" {
			b.WriteString(":xxxxx")
		}
		b.WriteByte('@')
	}
	if cfg.Net == "unix" {
		b.WriteString("/" + url.PathEscape(cfg.DBName) + "?socket=" + url.QueryEscape(cfg.Addr))
		return b.String()
	}
	b.WriteString(cfg.Addr + "/" + url.PathEscape(cfg.DBName))
	return b.String()
}

func fromURL(dsn, scheme string) (*gomysql.Config, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		// url.Error quotes the whole URL, password included: say less.
		return nil, fmt.Errorf("%w: not a valid mysql:// URL", ErrBadDSN)
	}
	if u.Opaque != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%w: want mysql://user:password@host:port/dbname?params", ErrBadDSN)
	}
	// An '@' after the authority (which ends at the first '/', '?' or '#')
	// is most likely a password's: mysql://u:12/34@h parses as host u,
	// port 12 and database "34@h", which Display would print.
	if _, rest, ok := strings.Cut(dsn, "://"); ok {
		if i := strings.IndexAny(rest, "/?#"); i >= 0 && strings.Contains(rest[i:], "@") {
			return nil, fmt.Errorf("%w: an '@' after the host (percent-encode '@', '/', '?' and '#' in the user name and password)", ErrBadDSN)
		}
	}
	base := gomysql.NewConfig()
	if u.User != nil {
		base.User = u.User.Username()
		base.Passwd, _ = u.User.Password()
	}
	if strings.Contains(base.User, ":") {
		return nil, fmt.Errorf("%w: a user name containing ':' is not supported", ErrBadDSN)
	}
	db := strings.TrimPrefix(u.Path, "/")
	if strings.Contains(db, "/") {
		return nil, fmt.Errorf("%w: the database name contains '/'", ErrBadDSN)
	}
	base.DBName = db
	q := u.Query()
	if err := urlAddr(base, u, q, scheme); err != nil {
		return nil, err
	}
	// Let the driver parse the parameters (with their validation) by
	// formatting base and appending them.
	s := base.FormatDSN()
	if params := urlParams(q); params != "" {
		if strings.Contains(s, "?") {
			s += "&" + params
		} else {
			s += "?" + params
		}
	}
	cfg, err := gomysql.ParseDSN(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrBadDSN, redactString(err.Error(), s, base.Passwd))
	}
	return cfg, nil
}

// urlAddr sets base's network and address from u: the socket parameter
// (taken out of q) or the host and port, defaulting to 127.0.0.1 and the
// scheme's port.
func urlAddr(base *gomysql.Config, u *url.URL, q url.Values, scheme string) error {
	if sock := q.Get("socket"); sock != "" {
		if u.Host != "" {
			return fmt.Errorf("%w: give either a host or a socket, not both", ErrBadDSN)
		}
		base.Net, base.Addr = "unix", sock
		q.Del("socket")
		return nil
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "3306"
		if scheme == "tidb" {
			port = "4000"
		}
	}
	base.Net, base.Addr = "tcp", net.JoinHostPort(host, port)
	return nil
}

// urlParams formats q as the driver's DSN parameters, sorted by name,
// each value query-escaped as the driver's format requires.
func urlParams(q url.Values) string {
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var params []string
	for _, k := range keys {
		for _, v := range q[k] {
			params = append(params, url.QueryEscape(k)+"="+url.QueryEscape(v))
		}
	}
	return strings.Join(params, "&")
}

// redactString returns msg, the driver's error for the driver DSN dsn,
// without the password: the one the driver reads from dsn (what lies
// between the first ':' and the last '@' before the last '/') and each of
// passwords. When dsn has an '@' after its last '/' (or has no '/') that
// password's extent is unclear, and so is what the driver may have quoted;
// msg is then kept only if it is one of the driver's fixed "invalid DSN:"
// messages. A fixed message also replaces msg when msg holds a password
// shorter than four bytes (replacing it would garble msg) or still holds
// one after the replacing.
func redactString(msg, dsn string, passwords ...string) string {
	const withheld = "want [user[:password]@][net[(addr)]]/dbname[?param=value] " +
		"(the driver's message is withheld: it may contain the password)"
	if at := strings.LastIndexByte(dsn, '@'); at >= 0 {
		if at > strings.LastIndexByte(dsn, '/') {
			if strings.HasPrefix(msg, "invalid DSN: ") && !strings.ContainsAny(msg, "\"'`") {
				return msg
			}
			return withheld
		}
		if _, pw, ok := strings.Cut(dsn[:at], ":"); ok {
			passwords = append(passwords, pw)
		}
	}
	for _, pw := range passwords {
		if pw == "" || !strings.Contains(msg, pw) {
			continue
		}
		if len(pw) < 4 {
			return withheld
		}
		msg = strings.ReplaceAll(msg, pw, "xxxxx")
	}
	for _, pw := range passwords {
		if pw != "" && strings.Contains(msg, pw) {
			return withheld
		}
	}
	return msg
}
