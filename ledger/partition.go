package ledger

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
)

// bucketsAhead is how many buckets past the clock skew a sweep creates
// ahead of time, at least (see aheadAtLeast): a sweep may then be missed
// for a bucket's width without a claim failing for lack of its bucket
// (PostgreSQL) or landing in the catch-all partition (MySQL).
const bucketsAhead = 2

// aheadAtLeast is how far past the clock skew a sweep creates buckets
// ahead of time whatever their width: with narrow buckets, a sweep may
// still be missed for most of a day.
const aheadAtLeast = 24 * time.Hour

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
// droppableAt) and its entries' own retention has passed too (see
// keptLonger), creates the buckets of the births to come, and deletes
// the expired entries of the partitions that hold keys without a known
// birth or without a bucket yet with del, given each partition's
// statements (the Partitioner's SweepQueries). handled is false when the
// table is not partitioned (the caller then deletes as it always did).
// The expired entries that other transactions held, as del reports them
// (a *HeldError without Err), and those of a bucket that other sweeps,
// dropping buckets at the same time, kept from being dropped
// (dialectkit.ErrPartitionBusy), are summed in one *HeldError, as Sweep
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
	width := s.width
	if width == 0 {
		width = defaultBucketWidth(s.retention)
	}
	kept, n, held, err := s.dropDue(ctx, pt, db, parts, now)
	if err != nil {
		return n, true, s.fail(ctx, "sweep", err)
	}
	if err := s.createAhead(ctx, pt, db, kept, now, width); err != nil {
		return n, true, err
	}
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

// dropDue drops the buckets of parts that are due at now (see dropNow)
// and returns the partitions kept, how many entries the dropped buckets
// held (as sweepPartitioned counts them), and how many the buckets held
// that other sweeps, dropping buckets of the table at the same time, kept
// from being dropped (dialectkit.ErrPartitionBusy; those are kept).
func (s *txStore[TX]) dropDue(ctx context.Context, pt dialectkit.Partitioner, db dialectkit.DB, parts []dialectkit.Partition, now time.Time) (kept []dialectkit.Partition, n, held int64, err error) {
	for _, p := range parts {
		drop, err := s.dropNow(ctx, db, p, now)
		if err != nil {
			return nil, n, held, err
		}
		if !drop {
			kept = append(kept, p)
			continue
		}
		rows := p.Rows
		if rows < 0 {
			rows = countRows(ctx, db, s.d.QuoteIdent(p.Name))
		}
		switch err := pt.DropPartition(ctx, db, s.table, p); {
		case errors.Is(err, dialectkit.ErrPartitionBusy):
			held += max(rows, 0)
			kept = append(kept, p)
			continue
		case err != nil:
			return nil, n, held, err
		}
		n += max(rows, 0)
	}
	return kept, n, held, nil
}

// dropNow reports whether p is a bucket to drop at now: droppableAt has
// passed, and so has the retention its entries were written with.
func (s *txStore[TX]) dropNow(ctx context.Context, db dialectkit.DB, p dialectkit.Partition, now time.Time) (bool, error) {
	if p.Kind != dialectkit.Bucket || s.droppableAt(p).After(now) {
		return false, nil
	}
	var (
		longer time.Duration
		err    error
	)
	for range sampleAttempts {
		// Another sweep detaching p concurrently (PostgreSQL) waits for
		// this read's snapshot while it holds the partition's lock that
		// the read waits for: PostgreSQL fails one of the two as a
		// deadlock. The detach tries itself again; so does the read.
		if longer, err = s.keptLonger(ctx, db, p); err == nil || s.d.Classify(err) != dialects.ClassDeadlock {
			break
		}
	}
	if err != nil {
		return false, err
	}
	return !fromMicros(p.To).Add(longer + s.skew).After(now), nil
}

// sampleAttempts bounds how often dropNow reads a bucket's sample after
// a deadlock with another sweep.
const sampleAttempts = 3

// keptLonger returns the retention bucket p's entries were written with
// (see dialectkit.WrittenRetention): the retention of the servers that
// wrote them, which a sweeper configured with a shorter one (an `opledger
// sweep` left at its default, a retention lengthened since) must honour
// before it drops the bucket, or it would forget keys those servers still
// promise to remember.
func (s *txStore[TX]) keptLonger(ctx context.Context, db dialectkit.DB, p dialectkit.Partition) (time.Duration, error) {
	return dialectkit.WrittenRetention(ctx, db, s.d.QuoteIdent(s.table), p)
}

// droppableAt is when bucket p may be dropped: once its end plus the
// retention plus the clock skew has passed, every key it can hold (born
// before its end) is refused as expired by every server whose clock is
// within the skew of this one, so no claim can commit into it any more.
func (s *txStore[TX]) droppableAt(p dialectkit.Partition) time.Time {
	return fromMicros(p.To).Add(s.retention + s.skew)
}

// createAhead creates the buckets, width wide and aligned to the Unix
// epoch, that births from a retention ago to bucketsAhead buckets (or
// aheadAtLeast, whichever is longer) past the clock skew fall in, where
// no bucket covers them yet; a bucket already droppable is not created.
// Where buckets of another width exist (a table whose width changes), a
// bucket starts at the end of the one before and ends at the next
// boundary of width or at the start of the next bucket.
func (s *txStore[TX]) createAhead(ctx context.Context, pt dialectkit.Partitioner, db dialectkit.DB, parts []dialectkit.Partition, now time.Time, width time.Duration) error {
	w := width.Microseconds()
	start := floorTo(micros(now.Add(-s.retention)), w)
	end := micros(now.Add(s.skew)) + max(bucketsAhead*w, aheadAtLeast.Microseconds())
	for a := start; a < end; {
		if c, ok := coveringEnd(parts, a); ok {
			a = c // go on from the covering bucket's end
			continue
		}
		b := nextStart(parts, a, floorTo(a, w)+w) // the next boundary of width, or of a bucket
		if !s.droppableAt(dialectkit.Partition{To: b}).After(now) {
			a = b
			continue
		}
		created, err := pt.CreatePartition(ctx, db, s.table, bucketSuffix(a, width), a, b)
		if err != nil {
			return s.fail(ctx, "sweep", err)
		}
		if created {
			parts = append(parts, dialectkit.Partition{Kind: dialectkit.Bucket, From: a, To: b})
		}
		a = b
	}
	return nil
}

// coveringEnd returns the end of the bucket of parts that holds births at
// us, if one does.
func coveringEnd(parts []dialectkit.Partition, us int64) (int64, bool) {
	for _, p := range parts {
		if p.Kind == dialectkit.Bucket && p.From <= us && us < p.To {
			return p.To, true
		}
	}
	return 0, false
}

// nextStart returns the earliest start of a bucket of parts in (from,
// to), or to when none starts there: a bucket created from from ends there.
func nextStart(parts []dialectkit.Partition, from, to int64) int64 {
	for _, p := range parts {
		if p.Kind == dialectkit.Bucket && from < p.From && p.From < to {
			to = p.From
		}
	}
	return to
}

// defaultBucketWidth is the bucket width for retention r unless
// WithBucketWidth says otherwise: the widest width at most r/24 that
// divides a day or is whole days, and at least an hour. About
// 24 buckets then hold the kept keys (and a day's worth more are created
// ahead: see aheadAtLeast), so a drop removes about a 24th of them, and a
// table holds at most about 50 partitions, whatever its retention.
func defaultBucketWidth(r time.Duration) time.Duration {
	const day = 24 * time.Hour
	w := r / 24
	switch {
	case w >= day:
		return w - w%day
	case w <= time.Hour:
		return time.Hour
	}
	for _, h := range []time.Duration{12, 8, 6, 4, 3, 2} {
		if w >= h*time.Hour {
			return h * time.Hour
		}
	}
	return time.Hour
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
// pYYYYMMDD for a bucket of whole days that starts at a midnight,
// pYYYYMMDDtHHMMSS otherwise.
func bucketSuffix(from int64, width time.Duration) string {
	t := fromMicros(from)
	if width%(24*time.Hour) == 0 && t.Equal(t.Truncate(24*time.Hour)) {
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
	var n sql.NullInt64
	if !rows.Next() || rows.Scan(&n) != nil || !n.Valid {
		return -1
	}
	return n.Int64
}
