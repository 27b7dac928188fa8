package mysqldialect

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/opledger/opledger/dialects"
)

// Querier is what [Detect] asks: *sql.DB, *sql.Conn and *sql.Tx satisfy
// it.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Detect asks the server behind q for VERSION() and @@version_comment and
// returns the dialect for it (see [ForVersion]): [NewTiDB] for TiDB, [New]
// for MySQL and MariaDB. (TiDB's server-version setting can make VERSION()
// look like MySQL's; its version comment still names TiDB.) A Dialect
// holds no connection, so a program that does not know which server it
// will meet calls Detect once, after opening the pool.
func Detect(ctx context.Context, q Querier) (Dialect, error) {
	var v, comment sql.NullString
	if err := q.QueryRowContext(ctx, "SELECT VERSION(), @@version_comment").Scan(&v, &comment); err != nil {
		return Dialect{}, fmt.Errorf("mysql: detect the server (SELECT VERSION(), @@version_comment): %w", err)
	}
	if d := ForVersion(v.String); d.tidb {
		return d, nil
	}
	return ForVersion(comment.String), nil
}

// ForVersion returns the dialect for a server whose VERSION() (or
// @@version_comment) is v: [NewTiDB] when v names TiDB (TiDB answers
// "8.0.11-TiDB-v8.5.3", and "TiDB Server (Apache License 2.0) Community
// Edition, MySQL 8.0 compatible"), [New] otherwise (MySQL "8.0.36",
// MariaDB "10.11.6-MariaDB-0+deb12u1").
func ForVersion(v string) Dialect {
	if strings.Contains(strings.ToLower(v), "tidb") {
		return NewTiDB()
	}
	return New()
}

// tidbTxnModeParam is the session variable that selects TiDB's
// transaction mode, and pessimistic its value for the driver's DSN (the
// driver sends each unknown parameter as SET name = value).
const (
	tidbTxnModeParam = "tidb_txn_mode"
	pessimistic      = "pessimistic"
)

// Configure adds to cfg the connection parameters d's server needs that
// cfg does not set, and reports whether it added any. For TiDB that is
// tidb_txn_mode = 'pessimistic' (see [NewTiDB]), which the driver sets on
// every connection it opens; for MySQL and MariaDB nothing. A parameter
// cfg already sets is left as it is. [Config] calls it for a tidb:// URL;
// call it yourself after [Detect] found TiDB behind a mysql:// URL.
func (d Dialect) Configure(cfg *gomysql.Config) bool {
	if !d.tidb || cfg == nil {
		return false
	}
	for k := range cfg.Params {
		if strings.EqualFold(k, tidbTxnModeParam) {
			return false
		}
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params[tidbTxnModeParam] = "'" + pessimistic + "'"
	return true
}

// tidbCheckQuery reads what decides whether TiDB checks the ledger's unique
// key at the INSERT: the session's transaction mode, and (in pessimistic
// mode, TiDB 6.3 and later) whether unique checks are lazy.
const tidbCheckQuery = "SELECT @@tidb_txn_mode, @@tidb_constraint_check_in_place_pessimistic"

// CheckTx implements [dialectkit.TxChecker]. On MySQL and MariaDB it does
// nothing. On TiDB it reads tidb_txn_mode and
// tidb_constraint_check_in_place_pessimistic in tx and returns an error
// matching [dialects.ErrUnsuitableTx], naming the fix, unless the
// transaction is pessimistic with unique checks at the INSERT (TiDB's
// defaults). It reads the session's variables, which decide the mode of
// each transaction at its BEGIN: a session that changes tidb_txn_mode
// inside a transaction, or begins with BEGIN OPTIMISTIC, is not seen.
func (d Dialect) CheckTx(ctx context.Context, tx *sql.Tx) error {
	if !d.tidb {
		return nil
	}
	if tx == nil {
		return fmt.Errorf("%w: nil transaction", dialects.ErrUnsuitableTx)
	}
	var mode, inPlace sql.NullString
	if err := tx.QueryRowContext(ctx, tidbCheckQuery).Scan(&mode, &inPlace); err != nil {
		return err
	}
	return tidbTxnVerdict(mode.String, inPlace.String)
}

// tidbTxnVerdict decides from the two session variables CheckTx reads.
func tidbTxnVerdict(mode, inPlace string) error {
	if !strings.EqualFold(strings.TrimSpace(mode), pessimistic) {
		return fmt.Errorf("%w: TiDB runs this transaction optimistically (tidb_txn_mode = %q), "+
			"checking the ledger's unique key only at COMMIT; set tidb_txn_mode = 'pessimistic' "+
			"(a tidb:// URL through mysql.DSN sets it on every connection, and txmiddleware.WithLockWait "+
			"for each transaction it begins)", dialects.ErrUnsuitableTx, truncate(mode))
	}
	switch strings.ToUpper(strings.TrimSpace(inPlace)) {
	case "ON", "1", "TRUE":
		return nil
	}
	return fmt.Errorf("%w: TiDB defers this pessimistic transaction's unique checks to COMMIT "+
		"(tidb_constraint_check_in_place_pessimistic = %q); set it to ON, its default",
		dialects.ErrUnsuitableTx, truncate(inPlace))
}

func truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}
