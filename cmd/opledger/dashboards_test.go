package main

import (
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// kitInstruments reads, from the kit's Go source (every module of the
// repository), the instruments it registers and the attribute keys of
// internal/telemetry, and returns the names the Prometheus exporter
// writes for them: a counter's name_total, a histogram's
// name[_seconds]_bucket, _sum and _count, a gauge's name; and the labels.
func kitInstruments(t *testing.T, root string) (metrics, labels map[string]bool) {
	t.Helper()
	inst := regexp.MustCompile(`(Int64|Float64)(Counter|Histogram|ObservableGauge|Gauge|UpDownCounter|ObservableCounter)\(\s*"([a-z0-9_.]+)"`)
	unit := regexp.MustCompile(`WithUnit\("([^"]*)"\)`)
	key := regexp.MustCompile(`attribute\.Key\("([a-z0-9_.]+)"\)`)
	metrics, labels = map[string]bool{}, map[string]bool{"le": true}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, ix := range inst.FindAllStringSubmatchIndex(string(src), -1) {
			m := []string{"", string(src[ix[2]:ix[3]]), string(src[ix[4]:ix[5]]), string(src[ix[6]:ix[7]])}
			// The unit is among the options that follow, before the
			// next instrument's name.
			tail := string(src[ix[1]:min(ix[1]+300, len(src))])
			if next := inst.FindStringIndex(tail); next != nil {
				tail = tail[:next[0]]
			}
			name := strings.ReplaceAll(m[3], ".", "_")
			u := unit.FindStringSubmatch(tail)
			switch m[2] {
			case "Counter", "ObservableCounter":
				metrics[name+"_total"] = true
			case "Histogram":
				if u != nil && u[1] == "s" {
					name += "_seconds"
				}
				metrics[name+"_bucket"], metrics[name+"_sum"], metrics[name+"_count"] = true, true, true
			default:
				metrics[name] = true
			}
		}
		if filepath.Base(filepath.Dir(path)) == "telemetry" {
			for _, m := range key.FindAllStringSubmatch(string(src), -1) {
				labels[strings.ReplaceAll(m[1], ".", "_")] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return metrics, labels
}

var (
	promMatchers = regexp.MustCompile(`\{([^}]*)\}`)
	promMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	promGrouping = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	promIdent    = regexp.MustCompile(`\b(?:opledger|grpc)_[a-z0-9_]+\b`)
	promTemplate = regexp.MustCompile(`\{\{[^}]*\}\}`)
)

// promNames returns the metrics and the labels a PromQL expression names.
func promNames(expr string) (metrics, labels []string) {
	for _, m := range promMatchers.FindAllStringSubmatch(expr, -1) {
		for _, l := range promMatcher.FindAllStringSubmatch(m[1], -1) {
			labels = append(labels, l[1])
		}
	}
	for _, m := range promGrouping.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(m[1], ",") {
			labels = append(labels, strings.TrimSpace(l))
		}
	}
	rest := promGrouping.ReplaceAllString(promMatchers.ReplaceAllString(expr, ""), "")
	metrics = promIdent.FindAllString(rest, -1)
	return metrics, labels
}

// dashboardExprs returns every PromQL expression of the alert rules and
// the Grafana dashboard, and the labels their legends and annotations
// name.
func dashboardExprs(t *testing.T, root string) (exprs map[string][]string, templLabels []string) {
	t.Helper()
	exprs = map[string][]string{}
	rules, err := os.ReadFile(filepath.Join(root, "deploy/prometheus/opledger-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := 0
	for _, line := range strings.Split(string(rules), "\n") {
		l := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(l, "expr:"):
			exprs["opledger-rules.yml"] = append(exprs["opledger-rules.yml"], strings.TrimSpace(strings.TrimPrefix(l, "expr:")))
		case strings.HasPrefix(l, "- alert:"):
			alerts++
		}
		for _, m := range regexp.MustCompile(`\$labels\.([a-z0-9_]+)`).FindAllStringSubmatch(l, -1) {
			templLabels = append(templLabels, m[1])
		}
	}
	if alerts == 0 || alerts != len(exprs["opledger-rules.yml"]) {
		t.Errorf("opledger-rules.yml: %d alerts, %d expressions", alerts, len(exprs["opledger-rules.yml"]))
	}
	raw, err := os.ReadFile(filepath.Join(root, "deploy/grafana/opledger.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr, LegendFormat string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("opledger.json: %v", err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs["opledger.json: "+p.Title] = append(exprs["opledger.json: "+p.Title], tg.Expr)
			for _, m := range promTemplate.FindAllString(tg.LegendFormat, -1) {
				templLabels = append(templLabels, strings.Trim(m, "{} "))
			}
		}
	}
	return exprs, templLabels
}

// TestDashboardsUseKitMetrics: every metric and label the Prometheus alert
// rules (deploy/prometheus/opledger-rules.yml) and the Grafana dashboard
// (deploy/grafana/opledger.json) name is one the kit registers: the
// instruments created in its source, with the exporter's suffixes, and
// the attribute keys of internal/telemetry. The queries docs/operations.md
// names are in them. With promtool installed (Debian's prometheus
// package), promtool check rules accepts the rules.
func TestDashboardsUseKitMetrics(t *testing.T) {
	root := filepath.Join("..", "..")
	metrics, labels := kitInstruments(t, root)
	if !metrics["opledger_server_calls_total"] || !metrics["opledger_ledger_claim_duration_seconds_bucket"] || !labels["opledger_method"] {
		t.Fatalf("the source scan missed the kit's instruments: %v %v", keys(metrics), keys(labels))
	}
	exprs, templ := dashboardExprs(t, root)
	used := map[string]bool{}
	for where, list := range exprs {
		for _, e := range list {
			ms, ls := promNames(e)
			if len(ms) == 0 {
				t.Errorf("%s: %q names no kit metric", where, e)
			}
			for _, m := range ms {
				used[m] = true
				if !metrics[m] {
					t.Errorf("%s: metric %s is none the kit registers (%q)", where, m, e)
				}
			}
			for _, l := range ls {
				if !labels[l] {
					t.Errorf("%s: label %s is no attribute of the kit's (%q)", where, l, e)
				}
			}
		}
	}
	for _, l := range templ {
		if !labels[l] {
			t.Errorf("a legend or annotation names label %s, no attribute of the kit's", l)
		}
	}
	// The list: each is in the rules or the dashboard.
	for _, want := range []string{"opledger_server_retries_by_layer_total", "opledger_outbox_dead_total", "opledger_outbox_failed_batches_total",
		"opledger_outbox_published_total", "opledger_ledger_claims_total", "opledger_server_calls_total", "grpc_client_call_retries_sum"} {
		if !used[want] {
			t.Errorf("no rule or panel uses %s", want)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool is not installed (apt-get install prometheus): the rules' syntax is not checked")
		return
	}
	out, err := exec.Command(promtool, "check", "rules", filepath.Join(root, "deploy/prometheus/opledger-rules.yml")).CombinedOutput()
	if err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
