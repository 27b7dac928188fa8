package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"time"
)

// window is what opledger stats shows of the ledger's window: the
// retention and clock skew it was given (the servers' ledger.WithRetention
// and ledger.WithClockSkew: the table does not record them), the birth
// before which a key is refused as expired, and the entries by key birth.
type window struct {
	RetentionSeconds float64   `json:"retention_seconds"`
	ClockSkewSeconds float64   `json:"clock_skew_seconds"`
	WindowSeconds    float64   `json:"window_seconds"`
	RefusedBornUntil time.Time `json:"refused_born_before"`
	// WithBirth counts the entries whose key's birth is known (born_at
	// <> 0): a UUIDv7 key, or one sent with Idempotency-Key-First-Sent.
	WithBirth *int64 `json:"entries_with_birth,omitempty"`
	// WithoutBirth counts the others (born_at = 0): keys with no readable
	// birth, remembered for the retention from their claim.
	WithoutBirth *int64 `json:"entries_without_birth,omitempty"`
	// BirthUnavailable says why the counts by birth are missing.
	BirthUnavailable string `json:"birth_unavailable,omitempty"`
}

func newWindow(lw ledgerWindow, now time.Time) window {
	w := lw.retention - lw.skew
	return window{RetentionSeconds: lw.retention.Seconds(), ClockSkewSeconds: lw.skew.Seconds(), WindowSeconds: w.Seconds(),
		RefusedBornUntil: now.Add(-w).UTC().Truncate(time.Second)}
}

// hasBornAt reports whether the table has the born_at column of migration
// 00004: a query that reads no row, so it costs nothing on a large table.
func hasBornAt(ctx context.Context, db *sql.DB, q ledgerSQL) bool {
	rows, err := db.QueryContext(ctx, "SELECT born_at FROM "+q.table+" WHERE 1 = 0")
	if err != nil {
		return false
	}
	rows.Close()
	return true
}

// print writes the window's lines of the stats table.
func (w window) print(tw io.Writer, unavailable string) {
	d := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	fmt.Fprintf(tw, "window\t%v  (retention %v minus clock skew %v, from --retention and --clock-skew: give the servers' values)\n",
		d(w.WindowSeconds), d(w.RetentionSeconds), d(w.ClockSkewSeconds))
	fmt.Fprintf(tw, "  refused as expired\tkeys born before %s  (IDEMPOTENCY_KEY_EXPIRED: never run again)\n", w.RefusedBornUntil.Format(time.RFC3339))
	if unavailable != "" {
		fmt.Fprintf(tw, "entries by key birth\tunavailable  (%s)\n", unavailable)
		return
	}
	fmt.Fprintf(tw, "entries by key birth\n")
	fmt.Fprintf(tw, "  with a birth\t%d  (UUIDv7 keys, or sent with Idempotency-Key-First-Sent: refused once born before the window)\n", *w.WithBirth)
	fmt.Fprintf(tw, "  without\t%d  (no readable birth: remembered for the retention from the claim; a retry after it runs again)\n", *w.WithoutBirth)
}
