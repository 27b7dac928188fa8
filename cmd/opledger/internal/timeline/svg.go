package timeline

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// The picture's geometry and palette.
const (
	width     = 1280
	padL      = 96
	padR      = 40
	plotW     = width - padL - padR
	callsH    = 250
	latencyH  = 120
	laneH     = 30
	cardW     = 183
	cardH     = 58
	cardGap   = 10
	cardsPerR = 6
	font      = "DejaVu Sans, Verdana, Helvetica, Arial, sans-serif"
	ink       = "#1f2933"
	muted     = "#616e7c"
	grid      = "#e4e7eb"
)

// outcomeColour are the calls chart's colours, by Outcome.
var outcomeColour = [numOutcomes]string{"#3f9b6b", "#4a7fd4", "#8a5cd0", "#e3a026", "#d64545", "#7a0916"}

// lanes are the fault lanes, top to bottom, and the kinds each holds.
var lanes = []struct {
	name  string
	kinds []string
}{
	{"service", []string{FaultReplicaKill, FaultCommitKill, FaultOutage}},
	{"database", []string{FaultDBCrash, FaultDBRestart, FaultFailover, FaultRejoin}},
	{"network", []string{FaultCut, FaultBlackhole, FaultLatency}},
	{"injected", []string{FaultAnswerLost, FaultSendFailed}},
}

// faultStyle is how a kind is drawn: its colour and legend text.
var faultStyle = map[string]struct{ colour, legend string }{
	FaultReplicaKill: {"#b42318", "replica SIGKILL"},
	FaultCommitKill:  {"#e8590c", "replica killed after COMMIT"},
	FaultOutage:      {"#52606d", "total outage of the service"},
	FaultDBCrash:     {"#d64545", "database crash"},
	FaultDBRestart:   {"#7b8794", "database restart"},
	FaultFailover:    {"#6741d9", "failover (kill → promoted)"},
	FaultRejoin:      {"#b197fc", "old primary rejoins as standby"},
	FaultCut:         {"#52606d", "connections cut"},
	FaultBlackhole:   {"#1f2933", "blackhole"},
	FaultLatency:     {"#9aa5b1", "latency"},
	FaultAnswerLost:  {"#e8590c", "answers lost after commit"},
	FaultSendFailed:  {"#9aa5b1", "failed before send"},
}

// WriteSVG draws c as a self-contained SVG document.
func (c Chart) WriteSVG(w io.Writer) error {
	if len(c.Calls) == 0 {
		return ErrEmpty
	}
	bw := bufio.NewWriter(w)
	d := &drawing{w: bw, c: c, s: c.series(), span: c.span(), bucket: c.bucket()}
	d.draw()
	return bw.Flush()
}

type drawing struct {
	w      *bufio.Writer
	c      Chart
	s      series
	span   time.Duration
	bucket time.Duration
}

func (d *drawing) printf(format string, args ...any) { fmt.Fprintf(d.w, format, args...) }

// x maps a time to the horizontal axis.
func (d *drawing) x(t time.Duration) float64 {
	end := d.bucket * time.Duration(len(d.s.counts))
	return padL + float64(plotW)*float64(t)/float64(end)
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

func (d *drawing) text(x, y float64, size int, colour, anchor, weight, s string) {
	d.printf(`<text x="%.1f" y="%.1f" font-size="%d" fill="%s" text-anchor="%s" font-weight="%s">%s</text>`+"\n",
		x, y, size, colour, anchor, weight, esc(s))
}

func (d *drawing) draw() {
	activeLanes := d.activeLanes()
	kinds := d.kinds()
	legendRows := (len(kinds) + legendCols - 1) / legendCols
	callsTop := 122.0
	latTop := callsTop + callsH + 48
	lanesTop := latTop + latencyH + 48
	lanesBottom := lanesTop + float64(len(activeLanes)*laneH)
	axisY := lanesBottom + 20
	legendTop := axisY + 34
	cardsTop := legendTop + float64(legendRows)*20 + 44
	rows := (len(d.c.Totals) + cardsPerR - 1) / cardsPerR
	height := cardsTop + float64(rows)*(cardH+cardGap) + 20

	d.printf(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	d.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%.0f" viewBox="0 0 %d %.0f" font-family="%s">`+"\n",
		width, height, width, height, font)
	d.printf("<title>%s</title>\n<desc>%s</desc>\n", esc(d.c.Title), esc(d.c.Subtitle))
	d.printf(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	d.text(padL, 42, 24, ink, "start", "bold", d.c.Title)
	d.text(padL, 66, 13, muted, "start", "normal", d.c.Subtitle)

	d.text(padL, callsTop-14, 13, ink, "start", "bold", "calls per "+durLabel(d.bucket)+", by outcome")
	d.outcomeLegend(callsTop - 14)
	d.text(padL, latTop-14, 13, ink, "start", "bold", "latency of the calls that ended in each "+durLabel(d.s.latency)+" (log scale)")
	if len(activeLanes) > 0 {
		d.text(padL, lanesTop-14, 13, ink, "start", "bold", "faults injected")
	}

	d.bands(callsTop, latTop+latencyH)
	d.callsPanel(callsTop)
	d.latencyPanel(latTop)
	d.faultLanes(lanesTop, activeLanes)
	d.xAxis(callsTop, lanesBottom, axisY)
	d.faultLegend(legendTop, kinds)
	d.totals(cardsTop)
	d.printf("</svg>\n")
}

const legendCols = 4

// textWidth estimates the width of s at size px.
func textWidth(s string, size int) float64 { return float64(len([]rune(s))) * float64(size) * 0.58 }

// outcomeLegend draws the outcomes' swatches, right-aligned on the line y
// (AckLost only when the run has such calls).
func (d *drawing) outcomeLegend(y float64) {
	x := float64(width - padR)
	for o := numOutcomes - 1; o >= 0; o-- {
		if o == AckLost && !slices.ContainsFunc(d.c.Calls, func(c Call) bool { return c.Outcome == AckLost }) {
			continue
		}
		x -= textWidth(o.String(), 12)
		d.text(x, y, 12, ink, "start", "normal", o.String())
		x -= 17
		d.printf(`<rect x="%.1f" y="%.1f" width="12" height="12" rx="2" fill="%s"/>`+"\n", x, y-10, outcomeColour[o])
		x -= 18
	}
}

// kinds returns the kinds of fault the run has, in lane order.
func (d *drawing) kinds() []string {
	seen := map[string]bool{}
	for _, f := range d.c.Faults {
		seen[f.Kind] = true
	}
	var out []string
	for _, l := range lanes {
		for _, k := range l.kinds {
			if seen[k] {
				out = append(out, k)
			}
		}
	}
	return out
}

// faultLegend explains the fault markers, in columns.
func (d *drawing) faultLegend(top float64, kinds []string) {
	colW := float64(plotW) / legendCols
	for i, k := range kinds {
		x := float64(padL) + float64(i%legendCols)*colW
		y := top + float64(i/legendCols)*20
		d.marker(k, x+6, y-4, 5)
		d.text(x+18, y, 12, muted, "start", "normal", faultStyle[k].legend)
	}
}

// marker draws kind's legend symbol centred on (x, y).
func (d *drawing) marker(kind string, x, y, r float64) {
	c := faultStyle[kind].colour
	switch kind {
	case FaultReplicaKill:
		d.printf(`<path d="M%.1f %.1fL%.1f %.1fM%.1f %.1fL%.1f %.1f" stroke="%s" stroke-width="2.2" stroke-linecap="round"/>`+"\n",
			x-r, y-r, x+r, y+r, x-r, y+r, x+r, y-r, c)
	case FaultCommitKill:
		d.printf(`<path d="M%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fZ" fill="%s"/>`+"\n", x, y-r-1, x+r+1, y, x, y+r+1, x-r-1, y, c)
	case FaultCut, FaultAnswerLost, FaultSendFailed:
		d.printf(`<rect x="%.1f" y="%.1f" width="2" height="%.1f" fill="%s"/>`+"\n", x-1, y-r-1, 2*r+2, c)
	default:
		d.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="2" fill="%s"/>`+"\n", x-r-2, y-r, 2*r+4, 2*r, c)
	}
}

// bands shades the database-wide faults across the calls and latency
// panels, behind the bars.
func (d *drawing) bands(top, bottom float64) {
	for _, f := range d.c.Faults {
		var op float64
		switch f.Kind {
		case FaultDBCrash, FaultFailover:
			op = 0.13
		case FaultDBRestart, FaultOutage:
			op = 0.10
		case FaultRejoin:
			op = 0.06
		default:
			continue
		}
		x0, x1 := d.x(f.At), d.x(max(f.Until, f.At))
		d.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="%.2f"/>`+"\n",
			x0, top, max(x1-x0, 2), bottom-top, faultStyle[f.Kind].colour, op)
	}
}

// callsPanel draws the calls per bucket, stacked by outcome.
func (d *drawing) callsPanel(top float64) {
	peak := 1
	for _, c := range d.s.counts {
		sum := 0
		for _, n := range c {
			sum += n
		}
		peak = max(peak, sum)
	}
	yMax, step := niceScale(float64(peak), 5)
	y := func(v float64) float64 { return top + callsH - callsH*v/yMax }
	for v := 0.0; v <= yMax+step/2; v += step {
		d.printf(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", padL, y(v), width-padR, y(v), grid)
		d.text(padL-8, y(v)+4, 11, muted, "end", "normal", trimFloat(v))
	}
	d.printf(`<text transform="translate(%d %.1f) rotate(-90)" font-size="12" fill="%s" text-anchor="middle">calls per %s</text>`+"\n",
		padL-52, top+callsH/2, muted, durLabel(d.bucket))
	// One step-shaped area per outcome, on top of the ones below it.
	below := make([]int, len(d.s.counts))
	for o := range numOutcomes {
		var p strings.Builder
		drawn := false
		for i, c := range d.s.counts {
			if c[o] > 0 {
				drawn = true
			}
			x0, x1 := d.x(time.Duration(i)*d.bucket), d.x(time.Duration(i+1)*d.bucket)
			lo, hi := y(float64(below[i])), y(float64(below[i]+c[o]))
			if c[o] > 0 {
				fmt.Fprintf(&p, "M%.1f %.1fV%.1fH%.1fV%.1fZ", x0, lo, hi, x1, lo)
			}
			below[i] += c[o]
		}
		if drawn {
			d.printf(`<path class="calls" data-outcome="%s" d="%s" fill="%s"/>`+"\n", esc(o.String()), p.String(), outcomeColour[o])
		}
	}
	d.printf(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", padL, top+callsH, width-padR, top+callsH, muted)
}

// latencyPanel draws p50 and p99 of the calls that ended in each bucket,
// on a logarithmic scale.
func (d *drawing) latencyPanel(top float64) {
	lo, hi := time.Millisecond, time.Millisecond
	for _, v := range d.s.p99 {
		hi = max(hi, v)
	}
	decLo, decHi := 0.0, math.Ceil(math.Log10(float64(hi)/float64(time.Millisecond))+0.05)
	decHi = max(decHi, 1)
	y := func(v time.Duration) float64 {
		l := math.Log10(max(float64(v), float64(lo)) / float64(time.Millisecond))
		return top + latencyH - latencyH*(l-decLo)/(decHi-decLo)
	}
	for e := decLo; e <= decHi; e++ {
		v := time.Duration(math.Pow(10, e)) * time.Millisecond
		d.printf(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", padL, y(v), width-padR, y(v), grid)
		d.text(padL-8, y(v)+4, 11, muted, "end", "normal", durLabel(v))
	}
	d.printf(`<text transform="translate(%d %.1f) rotate(-90)" font-size="12" fill="%s" text-anchor="middle">latency</text>`+"\n",
		padL-52, top+latencyH/2, muted)
	line := func(vals []time.Duration) string {
		var p strings.Builder
		pen := false
		for i, v := range vals {
			if v <= 0 {
				pen = false
				continue
			}
			x0, x1 := d.x(time.Duration(i)*d.s.latency), d.x(time.Duration(i+1)*d.s.latency)
			if pen {
				fmt.Fprintf(&p, "V%.1fH%.1f", y(v), x1)
			} else {
				fmt.Fprintf(&p, "M%.1f %.1fH%.1f", x0, y(v), x1)
			}
			pen = true
		}
		return p.String()
	}
	d.printf(`<path d="%s" fill="none" stroke="#e8590c" stroke-width="1.6" stroke-linejoin="round"/>`+"\n", line(d.s.p99))
	d.printf(`<path d="%s" fill="none" stroke="%s" stroke-width="1.8" stroke-linejoin="round"/>`+"\n", line(d.s.p50), ink)
	d.printf(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", padL, top+latencyH, width-padR, top+latencyH, muted)
	p50, p99, p999 := Percentiles(d.c.Calls)
	// The legend, right-aligned: p50 and p99 lines, the whole run's
	// figures.
	ly := top - 14
	x := float64(width - padR)
	last := "whole run: p99.9 " + durLabel(p999)
	x -= textWidth(last, 12)
	d.text(x, ly, 12, muted, "start", "normal", last)
	for _, l := range []struct{ label, colour string }{{"p99 " + durLabel(p99), "#e8590c"}, {"p50 " + durLabel(p50), ink}} {
		x -= textWidth(l.label, 12) + 20
		d.text(x, ly, 12, ink, "start", "normal", l.label)
		d.printf(`<path d="M%.1f %.1fh16" stroke="%s" stroke-width="2"/>`+"\n", x-22, ly-4, l.colour)
		x -= 10
	}
}

// activeLanes returns the lanes that have faults.
func (d *drawing) activeLanes() []int {
	var out []int
	for i, l := range lanes {
		for _, f := range d.c.Faults {
			if slices.Contains(l.kinds, f.Kind) {
				out = append(out, i)
				break
			}
		}
	}
	return out
}

// faultLanes draws every fault in its lane, each a group of class
// "fault".
func (d *drawing) faultLanes(top float64, active []int) {
	for row, li := range active {
		l := lanes[li]
		y0 := top + float64(row*laneH)
		mid := y0 + laneH/2
		if row%2 == 0 {
			d.printf(`<rect x="%d" y="%.1f" width="%d" height="%d" fill="#f5f7fa"/>`+"\n", padL, y0, plotW, laneH)
		}
		d.text(padL-8, mid+4, 12, ink, "end", "bold", l.name)
		peak := 1
		for _, f := range d.c.Faults {
			if (f.Kind == FaultAnswerLost || f.Kind == FaultSendFailed) && slices.Contains(l.kinds, f.Kind) {
				peak = max(peak, f.N)
			}
		}
		for _, f := range d.c.Faults {
			if !slices.Contains(l.kinds, f.Kind) {
				continue
			}
			label := f.Label
			if label == "" {
				label = faultStyle[f.Kind].legend
			}
			d.printf(`<g class="fault" data-kind="%s" data-at-ms="%.1f"`, esc(f.Kind), float64(f.At.Microseconds())/1000)
			if f.Until > f.At {
				d.printf(` data-until-ms="%.1f"`, float64(f.Until.Microseconds())/1000)
			}
			if f.N > 0 {
				d.printf(` data-n="%d"`, f.N)
			}
			d.printf(">\n<title>%s at %s</title>\n", esc(label), durLabel(f.At))
			c := faultStyle[f.Kind].colour
			x0, x1 := d.x(f.At), d.x(max(f.Until, f.At))
			switch f.Kind {
			case FaultReplicaKill, FaultCommitKill:
				d.marker(f.Kind, x0, mid, 5)
			case FaultCut:
				h := math.Min(laneH-8, 6+2*math.Sqrt(float64(f.N)))
				d.printf(`<rect x="%.1f" y="%.1f" width="1.6" height="%.1f" fill="%s" fill-opacity="0.75"/>`+"\n", x0-0.8, mid-h/2, h, c)
			case FaultBlackhole, FaultLatency:
				yy := mid + 2
				if f.Kind == FaultLatency {
					yy = mid - 8
				}
				d.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="6" fill="%s" fill-opacity="0.55"/>`+"\n", x0, yy, max(x1-x0, 1.5), c)
			case FaultAnswerLost, FaultSendFailed:
				h := (laneH - 8) * float64(f.N) / float64(peak)
				base := y0 + laneH - 4
				dx := max(x1-x0-0.6, 1)
				if f.Kind == FaultSendFailed {
					d.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x0, base-h, dx, h, c)
				} else {
					d.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.8"/>`+"\n", x0, base-h, dx, h, c)
				}
			default: // a span: crash, restart, failover, rejoin, outage
				wd := max(x1-x0, 3)
				d.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%d" rx="3" fill="%s"/>`+"\n", x0, mid-9, wd, 18, c)
				short := map[string]string{FaultDBCrash: "crash", FaultDBRestart: "restart", FaultFailover: "failover",
					FaultRejoin: "rejoin", FaultOutage: "outage"}[f.Kind]
				if long := short + " " + durLabel(f.Until-f.At); f.Until > f.At && wd >= textWidth(long, 11)+10 {
					short = long
				}
				if wd >= textWidth(short, 11)+8 {
					d.text(x0+wd/2, mid+4, 11, "#ffffff", "middle", "bold", short)
				} else {
					d.text(x0+wd/2, y0-2, 10, c, "middle", "bold", short)
				}
			}
			d.printf("</g>\n")
		}
	}
}

// xAxis draws the time axis and its grid.
func (d *drawing) xAxis(top, bottom, axisY float64) {
	end := d.bucket * time.Duration(len(d.s.counts))
	step := niceStep(end, 14)
	for t := time.Duration(0); t <= end; t += step {
		x := d.x(t)
		d.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="2 4"/>`+"\n", x, top, x, bottom, grid)
		d.text(x, axisY, 11, muted, "middle", "normal", durLabel(t))
	}
	d.text(float64(width-padR), axisY+18, 12, muted, "end", "normal", "time since the first call")
}

// totals draws the run's figures as cards; the must-be-zero ones green
// when zero, red otherwise.
func (d *drawing) totals(top float64) {
	d.text(padL, top-14, 14, ink, "start", "bold", "totals")
	for i, t := range d.c.Totals {
		x := float64(padL) + float64(i%cardsPerR)*(cardW+cardGap)
		y := top + float64(i/cardsPerR)*(cardH+cardGap)
		fill, stroke, valueColour, note := "#f5f7fa", "#d9dee4", ink, t.Note
		switch {
		case t.MustBeZero && t.N == 0:
			fill, stroke, valueColour, note = "#e6f4ea", "#3f9b6b", "#1e7a4c", "✓ must be 0"
		case t.MustBeZero:
			fill, stroke, valueColour, note = "#fdecea", "#d64545", "#b42318", "✗ must be 0"
		case t.Counted && t.N != 0:
			fill, stroke, valueColour = "#fff4e0", "#e3a026", "#9a5b00"
		}
		value := t.Text
		if value == "" {
			value = Thousands(t.N)
		}
		d.printf(`<g class="total" data-label="%s" data-must-be-zero="%t">`+"\n", esc(t.Label), t.MustBeZero)
		d.printf(`<rect x="%.1f" y="%.1f" width="%d" height="%d" rx="8" fill="%s" stroke="%s"/>`+"\n", x, y, cardW, cardH, fill, stroke)
		d.text(x+12, y+20, 11, muted, "start", "normal", clip(t.Label, 30))
		size := 20
		room := float64(cardW - 24)
		if note != "" {
			room -= textWidth(note, 10) + 8
		}
		for size > 11 && textWidth(value, size)*1.05 > room {
			size--
		}
		d.text(x+12, y+46, size, valueColour, "start", "bold", value)
		if note != "" {
			d.text(x+cardW-10, y+46, 10, valueColour, "end", "normal", note)
		}
		d.printf("</g>\n")
	}
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// Thousands writes n with thousands separators: 10,000.
func Thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// niceScale returns an axis maximum at least v and its step, for about n
// steps, on 1, 2, 5 × 10^k.
func niceScale(v float64, n int) (float64, float64) {
	raw := max(v, 1) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	step = max(step, 1)
	return math.Ceil(v/step) * step, step
}

// niceStep returns a tick step for the time axis: at most n ticks.
func niceStep(end time.Duration, n int) time.Duration {
	for _, s := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
		time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
		time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute} {
		if end/s <= time.Duration(n) {
			return s
		}
	}
	return end / time.Duration(n)
}

func trimFloat(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.1f", v), "0"), ".")
}

// durLabel writes d briefly: 250ms, 1.5s, 2m.
func durLabel(d time.Duration) string {
	switch {
	case d < 10*time.Millisecond:
		return trimFloat(float64(d.Microseconds())/1000) + "ms"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Round(time.Millisecond).Milliseconds())
	case d < time.Minute:
		return trimFloat(d.Seconds()) + "s"
	}
	m := d / time.Minute
	if rest := d - m*time.Minute; rest >= time.Second/10 {
		return fmt.Sprintf("%dm%s", m, durLabel(rest))
	}
	return fmt.Sprintf("%dm", m)
}
