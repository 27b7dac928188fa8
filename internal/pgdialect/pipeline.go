package pgdialect

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/dialectkit"
	"github.com/opledger/opledger/internal/dialectkit/units"
)

var _ dialectkit.Pipeliner = Dialect{}

// notPending starts the message of the pipelined Complete's failure.
const notPending = "opledger: entry not pending"

// PipelineQueries returns the ledger's pipelined statements for table
// (see [dialectkit.Pipeliner]), with Record setting lock_timeout to wait
// (rounded up to milliseconds) for the rest of the transaction, as
// [Dialect.BoundedRecordQueries] does, when wait is positive.
//
// Complete is the completion of [Dialect.BirthQueries] (born_at its last
// argument) in a data-modifying CTE whose outer
// query counts the rows it completed and, unless there was exactly one,
// casts a message to an integer: the statement fails with SQLSTATE 22P02
// and a message that starts "opledger: entry not pending", and the COMMIT
// sent after it does not run; CompleteHour is where the completion's
// WHERE ends, before RETURNING. Record is the plain INSERT of the completed
// entry without ON CONFLICT: on any conflict it fails with 23505 (or, at
// REPEATABLE READ and SERIALIZABLE, 40001), so the COMMIT after it does
// not commit the work's writes. ok is false for a negative wait.
func (d Dialect) PipelineQueries(table string, wait time.Duration) (dialectkit.PipelineQueries, bool) {
	if wait < 0 {
		return dialectkit.PipelineQueries{}, false
	}
	lw := ""
	if wait > 0 {
		lw = strconv.FormatInt(units.Millis(wait), 10)
	}
	t := d.QuoteIdent(table)
	head := `WITH done AS (` + d.BirthQueries(table).Complete
	return dialectkit.PipelineQueries{
		Complete: head + ` RETURNING 1) ` +
			`SELECT CASE WHEN count(*) = 1 THEN 1 ELSE ('` + notPending + ` (' || count(*) || ' rows)')::int END FROM done`,
		CompleteHour:  len(head),
		Record:        d.recordInsert(table, lw, false),
		DeleteExpired: `DELETE FROM ` + t + ` WHERE id = $1 AND expires_at <= $2`,
	}, true
}

// NotPending reports whether err is the pipelined Complete's failure: an
// error with SQLSTATE 22P02 whose message carries the statement's own.
func (Dialect) NotPending(err error) bool {
	var s sqlStater
	return errors.As(err, &s) && s.SQLState() == "22P02" && strings.Contains(err.Error(), notPending)
}
