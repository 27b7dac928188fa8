package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"time"

	"github.com/opledger/opledger/dialects"
	"github.com/opledger/opledger/internal/dialectkit"
)

// partitionStat is one partition of a ledger table partitioned by key
// birth, as opledger stats shows it.
type partitionStat struct {
	Name string `json:"name"`
	// Kind is "bucket" (keys born in [born_from, born_before): dropped
	// whole), "unborn" (keys without a known birth) or "catch-all" (births
	// without a bucket yet); the last two are swept by DELETE.
	Kind       string     `json:"kind"`
	BornFrom   *time.Time `json:"born_from,omitempty"`
	BornBefore *time.Time `json:"born_before,omitempty"`
	// RowsEstimate is the catalog's estimate (-1: none yet; ANALYZE
	// TABLE makes one).
	RowsEstimate int64 `json:"rows_estimate"`
	// DroppableAt is when the sweep drops a bucket: its end plus the
	// retention plus the clock skew, once every key it can hold is
	// refused as expired; the retention is the longer of --retention and
	// the one its entries were written with (WrittenRetention).
	DroppableAt *time.Time `json:"droppable_at,omitempty"`
	// WrittenRetention is the longest retention among a sample of the
	// bucket's entries (expires_at - born_at), as the sweep reads it
	// before a drop; empty for an empty bucket.
	WrittenRetention string `json:"written_retention,omitempty"`
}

// readPartitions lists table's partitions by born_at from the catalog;
// nil when it is not partitioned (or the dialect cannot tell).
func readPartitions(ctx context.Context, db *sql.DB, d dialects.Dialect, table string, lw ledgerWindow) ([]partitionStat, error) {
	pt, ok := d.(dialectkit.Partitioner)
	if !ok {
		return nil, nil
	}
	parts, ok, err := pt.Partitions(ctx, db, table)
	if err != nil || !ok {
		return nil, err
	}
	out := make([]partitionStat, 0, len(parts))
	for _, p := range parts {
		ps := partitionStat{Name: p.Name, RowsEstimate: p.Rows}
		switch p.Kind {
		case dialectkit.Bucket:
			ps.Kind = "bucket"
			if p.From > 1 {
				ps.BornFrom = new(time.UnixMicro(p.From).UTC())
			}
			ps.BornBefore = new(time.UnixMicro(p.To).UTC())
			written, err := dialectkit.WrittenRetention(ctx, db, d.QuoteIdent(table), p)
			if err != nil {
				return nil, err
			}
			if written > 0 {
				ps.WrittenRetention = written.String()
			}
			ps.DroppableAt = new(time.UnixMicro(p.To).UTC().Add(max(lw.retention, written) + lw.skew))
		case dialectkit.Unborn:
			ps.Kind = "unborn"
		default:
			ps.Kind = "catch-all"
		}
		out = append(out, ps)
	}
	return out, nil
}

// printPartitions writes the partitions' lines of the stats table.
func printPartitions(tw io.Writer, parts []partitionStat, unavailable string) {
	switch {
	case unavailable != "":
		fmt.Fprintf(tw, "partitions\tunavailable  (%s)\n", unavailable)
		return
	case len(parts) == 0:
		fmt.Fprintf(tw, "partitions\tnone  (the table is not partitioned by key birth: the sweep deletes expired entries)\n")
		return
	}
	fmt.Fprintf(tw, "partitions\t%d by key birth  (a bucket is dropped whole once droppable; unborn and catch-all are swept by DELETE)\n", len(parts))
	for _, p := range parts {
		rows := "rows unknown"
		if p.RowsEstimate >= 0 {
			rows = fmt.Sprintf("~%d rows", p.RowsEstimate)
		}
		switch p.Kind {
		case "bucket":
			born := "before " + p.BornBefore.Format(time.RFC3339)
			if p.BornFrom != nil {
				born = p.BornFrom.Format(time.RFC3339) + " to " + p.BornBefore.Format(time.RFC3339)
			}
			kept := ""
			if p.WrittenRetention != "" {
				kept = ", written to be kept " + p.WrittenRetention
			}
			fmt.Fprintf(tw, "  %s\tbucket: born %s, %s%s, droppable at %s\n", p.Name, born, rows, kept, p.DroppableAt.Format(time.RFC3339))
		case "unborn":
			fmt.Fprintf(tw, "  %s\tkeys without a known birth, %s\n", p.Name, rows)
		default:
			fmt.Fprintf(tw, "  %s\tcatch-all (births without a bucket yet: the sweep creates buckets ahead to keep it empty), %s\n", p.Name, rows)
		}
	}
}
