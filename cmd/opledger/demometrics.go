package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"go.opentelemetry.io/otel/attribute"

	"github.com/opledger/opledger/internal/harness/otelread"
)

// metricRow is one line of the demo's metrics table: a metric summed
// over every attribute but the outcome and the reason.
type metricRow struct {
	name, outcome, reason string
	value                 float64 // counter sum, gauge value, histogram sum
	count                 uint64  // histograms
	hist                  bool
	unit                  string
}

// kitMetricRows sums points by metric, outcome and reason.
func kitMetricRows(points []otelread.Point) []metricRow {
	idx := map[[3]string]int{}
	var rows []metricRow
	for _, p := range points {
		if !strings.HasPrefix(p.Name, "opledger.") && !strings.HasPrefix(p.Name, "grpc.") {
			continue
		}
		k := [3]string{p.Name, p.Attr(attribute.Key("opledger.outcome")), p.Attr(attribute.Key("opledger.reason"))}
		i, ok := idx[k]
		if !ok {
			i = len(rows)
			idx[k] = i
			rows = append(rows, metricRow{name: k[0], outcome: k[1], reason: k[2], hist: p.IsHist, unit: p.Unit})
		}
		rows[i].value += p.Value
		rows[i].count += p.Count
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].name != rows[j].name {
			return rows[i].name < rows[j].name
		}
		if rows[i].outcome != rows[j].outcome {
			return rows[i].outcome < rows[j].outcome
		}
		return rows[i].reason < rows[j].reason
	})
	return rows
}

// printKitMetrics writes the kit's metrics, as the SDK's manual reader
// collected them, as a table.
func printKitMetrics(w io.Writer, points []otelread.Point) {
	fmt.Fprintln(w, "\nthe kit's OpenTelemetry metrics (read from the SDK's manual reader, summed over method and target):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  METRIC\tOUTCOME\tREASON\tVALUE\n")
	for _, r := range kitMetricRows(points) {
		v := fmt.Sprintf("%.0f", r.value)
		if r.hist {
			mean := 0.0
			if r.count > 0 {
				mean = r.value / float64(r.count)
			}
			if r.unit == "s" {
				v = fmt.Sprintf("%d recorded, mean %.2f ms", r.count, mean*1000)
			} else {
				v = fmt.Sprintf("%d recorded, sum %.0f, mean %.2f", r.count, r.value, mean)
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", r.name, dash(r.outcome), dash(r.reason), v)
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
