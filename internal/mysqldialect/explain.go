package mysqldialect

import (
	"errors"
	"fmt"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/opledger/opledger/internal/dialectkit"
)

var _ dialectkit.ErrorExplainer = Dialect{}

// ErrTiDBServer is matched (errors.Is) by the ledger's and txmiddleware's
// error when the MySQL/MariaDB dialect ([New], or the zero Dialect) runs
// against a TiDB server: TiDB refuses the read-back after a duplicate key,
// a shared lock (LOCK IN SHARE MODE), with error 1235. The fix is the TiDB
// variant: [NewTiDB], or [Detect] after opening the pool, or a tidb://
// URL through [DSN]. The driver's error stays reachable with errors.As.
var ErrTiDBServer = errors.New("mysql: the server is TiDB, but the dialect is mysql.New() (MySQL's and MariaDB's), " +
	"whose read-back TiDB refuses: build it with mysql.NewTiDB(), or let mysql.Detect(ctx, db) choose it, " +
	"or open a tidb:// URL with mysql.DSN (docs/scaling.md)")

// erNotSupportedYet is ER_NOT_SUPPORTED_YET, which TiDB sends for a no-op
// function it refuses (tidb_enable_noop_functions = OFF, its default).
const erNotSupportedYet = 1235

// ExplainError implements [dialectkit.ErrorExplainer]. For the
// MySQL/MariaDB dialect it wraps with [ErrTiDBServer] the error TiDB gives
// that dialect's read-back, 1235 "function LOCK IN SHARE MODE has only
// noop implementation in tidb now": the ledger then reports, on the first
// claim that meets an existing entry (a replay, a duplicate in flight, a
// key reused), which dialect to use instead of the server's refusal.
// Anything else, and every error of the TiDB variant, is returned as it
// is.
func (d Dialect) ExplainError(err error) error {
	if d.tidb || err == nil || errors.Is(err, ErrTiDBServer) {
		return err
	}
	var me *gomysql.MySQLError
	if errors.As(err, &me) && me != nil && me.Number == erNotSupportedYet &&
		strings.Contains(strings.ToUpper(me.Message), "LOCK IN SHARE MODE") {
		return fmt.Errorf("%w: %w", ErrTiDBServer, err)
	}
	return err
}
