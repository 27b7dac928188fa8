package console

import (
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/opledger/opledger/cmd/opledger/internal/timeline"
)

// maxShown is how many characters of one value a page shows; the rest is
// cut and counted.
const maxShown = 200

func parsePages() (map[string]*template.Template, error) {
	base, err := template.New("").Funcs(funcs).ParseFS(assets, "assets/layout.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, name := range []string{"overview", "outbox", "find", "dead", "error"} {
		t, err := base.Clone()
		if err != nil {
			return nil, err
		}
		if pages[name], err = t.ParseFS(assets, "assets/"+name+".html"); err != nil {
			return nil, err
		}
	}
	return pages, nil
}

var funcs = template.FuncMap{
	"visible": visible,
	"preview": func(b []byte) string { return visible(string(b)) },
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	},
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return round(now.Sub(t)).String()
	},
	"dur":   func(d time.Duration) string { return round(d).String() },
	"ms":    func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + " ms" },
	"bytes": BytesIEC,
	"count": func(c Count) string {
		s := timeline.Thousands(c.N)
		switch {
		case c.AtLeast:
			return "at least " + s
		case c.Estimated:
			return "about " + s
		}
		return s
	},
	"num":     timeline.Thousands,
	"f1":      func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) },
	"f0":      func(f float64) string { return strconv.FormatFloat(f, 'f', 0, 64) },
	"sub":     func(a, b time.Time) time.Duration { return a.Sub(b) },
	"past":    func(now, t time.Time) bool { return !t.IsZero() && !t.After(now) },
	"subn":    func(a, b int64) int64 { return a - b },
	"actions": func() []string { return []string{"retry", "discard"} },
	"rows":    func(now time.Time, rows []EntryRow) entryRows { return entryRows{Now: now, Rows: rows} },
}

// entryRows is what the entries template lists.
type entryRows struct {
	Now  time.Time
	Rows []EntryRow
}

// visible returns s as a page shows it: control characters and invalid
// UTF-8 as Go escapes (\x1b, \u2028), at most maxShown characters, the
// rest counted. html/template escapes the result; this keeps what
// escaping leaves (a terminal escape, a line separator, a megabyte) from
// misleading the reader.
func visible(s string) string {
	var b strings.Builder
	n := 0
	for i, r := range s {
		if n == maxShown {
			fmt.Fprintf(&b, "… (%d more bytes)", len(s)-i)
			break
		}
		n++
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Bidi_Control, r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func round(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

// BytesIEC formats n bytes with a binary unit: 1.5 KiB. opledger stats
// uses it too.
func BytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
