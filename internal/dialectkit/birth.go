package dialectkit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/opledger/opledger/dialects"
)

// BirthReader is implemented by dialects whose ledger table can be
// partitioned by the key's birth (born_at): their reads and completion by
// id also name born_at, so that a partitioned table is read in the one
// partition that can hold the entry instead of in every partition. The
// ledger then runs BirthQueries' statements in place of
// [dialects.Queries]' Select, Complete and Lookup (and of the bounded
// forms' Select), with the key's birth (Unix microseconds, 0 when
// unknown) as one more argument, the last; a dialect that also
// implements [Pipeliner] takes it last in PipelineQueries' Complete too.
//
// It is optional: check for it with a type assertion.
type BirthReader interface {
	// BirthQueries returns the statements for the given (already
	// validated, unquoted) table.
	BirthQueries(table string) BirthQueries
}

// BirthQueries are [dialects.Queries]' Select, Complete and Lookup with
// born_at = the key's birth added to their WHERE: the same arguments, and
// born_at last. Every attempt of one key carries the same birth (it is
// part of the key's identity), so the entry's born_at always equals it.
type BirthQueries struct {
	Select   string
	Complete string
	Lookup   string
	// PruneByHour, when set, has the ledger end Select, Complete and
	// Lookup, and the take-overs of an expired entry ([dialects.Queries]'
	// and RecordQueries' TakeOver; each of which ends in its WHERE) with
	// HourOfBirth's range of born_at as literals, and put it into the
	// pipelined completion too (PipelineQueries.CompleteHour): the plan a
	// driver's prepared statement caches then names the one or two
	// partitions of that hour instead of every partition, which
	// PostgreSQL would lock at each execution of a generic plan. The
	// read-back after a pipelined conflict keeps the plain Select: it is
	// prepared ahead, before the transaction it reads after can abort.
	PruneByHour bool
	// ClaimHour, when PruneByHour is set, is the text of the one-statement
	// claim ([dialects.Queries].Claim) after which the ledger puts
	// HourOfBirth's range: the end of the WHERE of its read of the entry.
	ClaimHour string
}

// HourOfBirth returns the condition on born_at, as literals, of the hour
// of births that holds born (Unix microseconds; the partition of unknown
// births for 0): " AND born_at >= lo AND born_at < hi".
func HourOfBirth(born int64) string {
	if born == 0 {
		return " AND born_at = 0"
	}
	const hour = int64(time.Hour / time.Microsecond)
	lo := born - born%hour
	if born%hour < 0 {
		lo -= hour
	}
	return " AND born_at >= " + strconv.FormatInt(lo, 10) + " AND born_at < " + strconv.FormatInt(lo+hour, 10)
}

// Partitioner is implemented by dialects that can keep a ledger table
// partitioned by a range of born_at (a bucket of birth times): Store.Sweep
// drops a bucket whole once every key it can hold is refused as expired,
// and creates the coming buckets ahead of time. The dialect owns the SQL;
// the ledger decides what to create and drop. Every method reads or
// changes the catalog through db, outside any transaction of the
// caller's.
type Partitioner interface {
	// Partitions lists table's partitions, in the order of their ranges;
	// ok is false when the table is not partitioned by born_at (then the
	// ledger sweeps it with DELETE only).
	Partitions(ctx context.Context, db DB, table string) (parts []Partition, ok bool, err error)
	// CreatePartition adds the bucket [from, to) (Unix microseconds) to
	// table, named after suffix ("pYYYYMMDD": PostgreSQL's table is
	// "<table>_<suffix>", MySQL's partition "<suffix>"). A database whose
	// ranges have only an upper bound (MySQL) adds it after the last
	// bucket, from there to to. created is false, with a nil error, when the
	// bucket could not be added because rows already in the table's
	// catch-all partition fall in it (they are swept by DELETE; the bucket
	// is tried again by a later sweep).
	CreatePartition(ctx context.Context, db DB, table, suffix string, from, to int64) (created bool, err error)
	// DropPartition removes the bucket p and its rows from table, waiting
	// (bounded) for the transactions that still use it; a partition that
	// is gone already (another sweep dropped it) is no error. An error
	// wrapping ErrPartitionBusy says that other sweeps, dropping buckets
	// of table at the same time, kept this one from being dropped: it is
	// left for a later sweep.
	DropPartition(ctx context.Context, db DB, table string, p Partition) error
	// SweepQueries returns the statements that sweep partition p (born_at
	// 0, or the catch-all) by DELETE, as [dialects.Queries]' Sweep,
	// CountExpired, SweepScan and SweepOne do for a whole table, with the
	// same arguments; the other fields are empty.
	SweepQueries(table string, p Partition) dialects.Queries
}

// ErrPartitionBusy is wrapped by a Partitioner's DropPartition that left
// a bucket to a later sweep because other sweeps were dropping buckets of
// the same table (PostgreSQL detaches one partition of a table at a time).
var ErrPartitionBusy = errors.New("other sweeps are dropping buckets of the table; left for the next sweep")

// PartitionKind says what a partition of a ledger table holds.
type PartitionKind int

// The kinds of partition.
const (
	// Bucket holds the keys born in [From, To): dropped whole.
	Bucket PartitionKind = iota + 1
	// Unborn holds the entries of keys without a known birth (born_at 0):
	// swept by DELETE.
	Unborn
	// CatchAll holds the entries whose bucket did not exist when they were
	// claimed (PostgreSQL's DEFAULT partition, MySQL's MAXVALUE one):
	// swept by DELETE, and kept empty by creating buckets ahead.
	CatchAll
)

// Partition is one partition of a ledger table.
type Partition struct {
	// Name is the partition's name (PostgreSQL: its table's; MySQL: the
	// partition's).
	Name string
	Kind PartitionKind
	// From and To bound a Bucket's births (Unix microseconds), From
	// included, To not. For MySQL, whose ranges have only an upper bound,
	// From is the previous partition's To.
	From, To int64
	// Rows is the catalog's estimate of its rows (-1 when unknown).
	Rows int64
}

// DB is what a Partitioner runs its statements on: *sql.DB and
// *sql.Conn (never a transaction: PostgreSQL detaches a partition
// concurrently only outside one).
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// BucketOf returns the bucket of parts that holds births at t.
func BucketOf(parts []Partition, t time.Time) (Partition, bool) {
	us := t.UnixMicro()
	for _, p := range parts {
		if p.Kind == Bucket && p.From <= us && us < p.To {
			return p, true
		}
	}
	return Partition{}, false
}

// SortPartitions orders parts by range: the partition of unknown births
// first, the buckets by From, the catch-all last.
func SortPartitions(parts []Partition) {
	rank := func(p Partition) int {
		switch p.Kind {
		case Unborn:
			return 0
		case Bucket:
			return 1
		}
		return 2
	}
	sort.SliceStable(parts, func(i, j int) bool {
		ri, rj := rank(parts[i]), rank(parts[j])
		if ri != rj {
			return ri < rj
		}
		return parts[i].From < parts[j].From
	})
}

// RetentionSample is how many of a bucket's entries WrittenRetention
// reads.
const RetentionSample = 64

// WrittenRetention returns the longest retention (expires_at - born_at)
// among a sample of bucket p's entries of table (quoted), 0 when it is
// empty: the retention of the servers that wrote them, which a sweep
// configured with a shorter one must honour before it drops the bucket.
// The read is bounded (RetentionSample entries, by the partition's range
// of born_at, which PostgreSQL and MySQL prune to p).
func WrittenRetention(ctx context.Context, db DB, quotedTable string, p Partition) (time.Duration, error) {
	q := fmt.Sprintf("SELECT MAX(expires_at - born_at) FROM (SELECT expires_at, born_at FROM %s WHERE born_at >= %d AND born_at < %d LIMIT %d) s",
		quotedTable, max(p.From, 1), p.To, RetentionSample)
	var longest sql.NullInt64
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	if rows.Next() {
		if err := rows.Scan(&longest); err != nil {
			return 0, err
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	return time.Duration(longest.Int64) * time.Microsecond, nil
}
