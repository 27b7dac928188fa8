package ledger

import (
	"context"
	"errors"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
)

// bucketsAhead is how many buckets past the clock skew a sweep creates
// ahead of time: a sweep may then be missed for a bucket's width without
// a claim landing in the catch-all partition.
const bucketsAhead = 2

// sweepPartitioned is Sweep on a table partitioned by born_at (see
// [txStore.sweepPartitioned]), deleting in the partitions of keys without
// a known birth or a bucket with Sweep's batches (deleteSweep) on db.
func (s *Store) sweepPartitioned(ctx context.Context, pt dialectkit.Partitioner, db dialectkit.DB, batch int) (n int64, handled bool, err error) {
	return s.core.sweepPartitioned(ctx, pt, db, func(ctx context.Context, q *dialects.Queries) (int64, error) {
		return s.deleteSweep(ctx, db, batch, q)
	})
}

// sweepPartitioned is a sweep on a table partitioned by born_at (see
// dialectkit.Partitioner), whose catalog it reads and changes through db:
// it drops each bucket once every key it can hold is refused as expired
// (its end plus the retention plus the clock skew has passed: see
// droppableAt), creates the buckets of the births to come, and deletes
// the expired entries of the partitions that hold keys without a known
// birth or without a bucket yet with del, given each partition's
// statements (the Partitioner's SweepQueries). handled is false when the
// table is not partitioned (the caller then deletes as it always did).
// The expired entries that other transactions held, as del reports them
// (a *HeldError without Err), are summed in one *HeldError, as Sweep
// reports them. The entries a dropped bucket held count in n as the
// catalog estimates them, or exactly when it has no estimate.
// [Store.Sweep] and [txStore.SweepWith] (package pgxledger's Sweep) are
// built on it.
func (s *txStore[TX]) sweepPartitioned(ctx context.Context, pt dialectkit.Partitioner, db dialectkit.DB, del func(ctx context.Context, q *dialects.Queries) (int64, error)) (n int64, handled bool, err error) {
	parts, ok, err := pt.Partitions(ctx, db, s.table)
	if err != nil {
		return 0, true, s.fail(ctx, "sweep", err)
	}
	if !ok {
		return 0, false, nil
	}
	now := s.now()
	width := bucketWidth(parts)
	var kept []dialectkit.Partition
	for _, p := range parts {
		if p.Kind != dialectkit.Bucket || s.droppableAt(p).After(now) {
			kept = append(kept, p)
			continue
		}
		rows := p.Rows
		if rows < 0 {
			rows = countRows(ctx, db, s.d.QuoteIdent(p.Name))
		}
		if err := pt.DropPartition(ctx, db, s.table, p); err != nil {
			return n, true, s.fail(ctx, "sweep", err)
		}
		n += max(rows, 0)
	}
	if err := s.createAhead(ctx, pt, db, kept, now, width); err != nil {
		return n, true, err
	}
	var held int64
	for _, p := range kept {
		if p.Kind == dialectkit.Bucket {
			continue
		}
		q := pt.SweepQueries(s.table, p)
		k, err := del(ctx, &q)
		n += k
		var h *HeldError
		switch {
		case errors.As(err, &h) && h.Err == nil:
			held += h.Held
		case err != nil:
			return n, true, err
		}
	}
	if held > 0 {
		return n, true, &HeldError{Held: held}
	}
	return n, true, nil
}

// droppableAt is when bucket p may be dropped: once its end plus the
// retention plus the clock skew has passed, every key it can hold (born
// before its end) is refused as expired by every server whose clock is
// within the skew of this one, so no claim can commit into it any more.
func (s *txStore[TX]) droppableAt(p dialectkit.Partition) time.Time {
	return fromMicros(p.To).Add(s.retention + s.skew)
}

// createAhead creates the buckets, width wide and aligned to the Unix
// epoch, that births from a retention ago to bucketsAhead buckets past the
// clock skew fall in, where no bucket covers them yet; a bucket already
// droppable is not created.
func (s *txStore[TX]) createAhead(ctx context.Context, pt dialectkit.Partitioner, db dialectkit.DB, parts []dialectkit.Partition, now time.Time, width time.Duration) error {
	w := width.Microseconds()
	start := floorTo(micros(now.Add(-s.retention)), w)
	end := micros(now.Add(s.skew)) + bucketsAhead*w
	for a := start; a < end; a += w {
		if covered(parts, a, a+w) || !s.droppableAt(dialectkit.Partition{To: a + w}).After(now) {
			continue
		}
		created, err := pt.CreatePartition(ctx, db, s.table, bucketSuffix(a, width), a, a+w)
		if err != nil {
			return s.fail(ctx, "sweep", err)
		}
		if created {
			parts = append(parts, dialectkit.Partition{Kind: dialectkit.Bucket, From: a, To: a + w})
		}
	}
	return nil
}

// covered reports whether a bucket of parts overlaps [from, to).
func covered(parts []dialectkit.Partition, from, to int64) bool {
	for _, p := range parts {
		if p.Kind == dialectkit.Bucket && p.From < to && from < p.To {
			return true
		}
	}
	return false
}

// bucketWidth is the width of parts' last bucket, or a day when there is
// none: the table's creator chose it (the migrations a day).
func bucketWidth(parts []dialectkit.Partition) time.Duration {
	for i := len(parts) - 1; i >= 0; i-- {
		p := parts[i]
		if p.Kind == dialectkit.Bucket && p.To > p.From && p.From > 1 {
			return time.Duration(p.To-p.From) * time.Microsecond
		}
	}
	return dialectkit.PartitionWidth
}

// floorTo rounds us down to a multiple of w.
func floorTo(us, w int64) int64 {
	r := us % w
	if r < 0 {
		r += w
	}
	return us - r
}

// bucketSuffix names the bucket starting at from (Unix microseconds, UTC):
// pYYYYMMDD for a bucket of whole days, pYYYYMMDDtHHMMSS otherwise.
func bucketSuffix(from int64, width time.Duration) string {
	t := fromMicros(from)
	if width%(24*time.Hour) == 0 {
		return "p" + t.Format("20060102")
	}
	return "p" + t.Format("20060102t150405")
}

// countRows counts the rows of the quoted table, -1 when it cannot.
func countRows(ctx context.Context, db dialectkit.DB, quoted string) int64 {
	rows, err := db.QueryContext(ctx, "SELECT count(*) FROM "+quoted)
	if err != nil {
		return -1
	}
	defer rows.Close()
	var n int64 = -1
	if rows.Next() {
		_ = rows.Scan(&n)
	}
	return n
}
