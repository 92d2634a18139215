package chart

import (
	"html"
	"html/template"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Point is one point of a series. NaN (or an infinity) is a gap.
type Point struct {
	T time.Time
	V float64
}

// Series is one line of a chart.
type Series struct {
	Label  string
	Points []Point
}

// Chart is what Line draws.
type Chart struct {
	// Title is drawn at the top left; Unit after it (and in the legend's
	// latest values). Unit "bytes" and "bytes/s" scale values by 1024
	// (KiB, MiB, GiB); any other by 1000 (k, M, G).
	Title, Unit string
	// Width and Height are the SVG's size in pixels (default 640 × 240;
	// at least 200 × 120). The legend takes its rows from Height.
	Width, Height int
	// From and To fix the time axis; zero: the points' extent.
	From, To time.Time
	// Series are the lines, at most MaxSeries of them drawn (the legend
	// says how many more were not).
	Series []Series
}

// MaxSeries is how many series a chart draws, each in its palette colour.
const MaxSeries = 8

// Palette is the series' colours, in order.
var Palette = [MaxSeries]string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

const (
	defaultWidth, defaultHeight = 640, 240
	padLeft                     = 56 // value tick labels
	padRight                    = 14
	padTop                      = 28 // title
	xLabels                     = 18 // time tick labels under the plot
	legendRow                   = 16
	charWidth                   = 6.2 // estimated width of an 11 px character
	maxLegendChars              = 40
	colText                     = "#1d2330"
	colMuted                    = "#5b6578"
	colGrid                     = "#dde2ea"
)

// Line draws c as an inline <svg> line chart: axes with time ticks (HH:MM,
// UTC) and value ticks in human units, a legend with each series' latest
// value, and one <path> per series whose subpaths break at the gaps. Each
// path carries data-label (the series' label) and data-points
// ("unixMillis:value" pairs separated by spaces, every point of the
// series in order, values as strconv.FormatFloat(v, 'g', -1, 64): NaN for
// a gap). It has no script, no style attribute or element (the console's
// CSP allows neither), no URL and no event handler; every text is
// escaped.
func Line(c Chart) template.HTML {
	w, h := c.Width, c.Height
	if w <= 0 {
		w = defaultWidth
	}
	if h <= 0 {
		h = defaultHeight
	}
	w, h = max(w, 200), max(h, 120)
	series := c.Series
	hidden := 0
	if len(series) > MaxSeries {
		hidden = len(series) - MaxSeries
		series = series[:MaxSeries]
	}

	// The legend's items, flowed into rows.
	type item struct {
		x, row int
		label  string
	}
	var items []item
	x, row := 8, 0
	for _, s := range series {
		label := truncate(s.Label, maxLegendChars)
		if last, ok := lastValue(s.Points); ok {
			label += " " + Format(last, c.Unit)
		}
		width := 22 + int(float64(len([]rune(label)))*charWidth) + 14
		if x > 8 && x+width > w-8 {
			x, row = 8, row+1
		}
		items = append(items, item{x: x, row: row, label: label})
		x += width
	}
	if hidden > 0 {
		more := "+" + strconv.Itoa(hidden) + " more not drawn"
		if x > 8 && x+int(float64(len(more))*charWidth) > w-8 {
			x, row = 8, row+1
		}
		items = append(items, item{x: x, row: row, label: more})
	}
	rows := 0
	if len(items) > 0 {
		rows = row + 1
	}
	legendH := rows * legendRow
	if rows > 0 {
		legendH += 6
	}
	// At least 40 px of plot: the SVG grows if the legend needs it.
	h = max(h, padTop+40+xLabels+legendH)
	plot := rect{x0: padLeft, y0: padTop, x1: float64(w - padRight), y1: float64(h - xLabels - legendH)}

	var b strings.Builder
	b.Grow(1024 + 64*len(series)*8)
	title := strings.TrimSpace(c.Title)
	b.WriteString(`<svg class="chart" width="`)
	b.WriteString(strconv.Itoa(w))
	b.WriteString(`" height="`)
	b.WriteString(strconv.Itoa(h))
	b.WriteString(`" viewBox="0 0 `)
	b.WriteString(strconv.Itoa(w) + " " + strconv.Itoa(h))
	b.WriteString(`" role="img" aria-label="`)
	b.WriteString(html.EscapeString(title))
	b.WriteString(`" font-family="system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', sans-serif" font-size="11">`)
	if title != "" {
		b.WriteString(`<title>` + html.EscapeString(title) + `</title>`)
	}
	// Title and unit.
	b.WriteString(`<text x="8" y="17" font-size="13" font-weight="600" fill="` + colText + `">` + html.EscapeString(title))
	if c.Unit != "" {
		b.WriteString(`<tspan font-weight="400" fill="` + colMuted + `"> (` + html.EscapeString(c.Unit) + `)</tspan>`)
	}
	b.WriteString(`</text>`)
	b.WriteString(`<text x="` + num(float64(w-padRight)) + `" y="17" text-anchor="end" fill="` + colMuted + `">UTC</text>`)

	// The axes' ranges.
	tMin, tMax := int64(math.MinInt64), int64(math.MaxInt64)
	if !c.From.IsZero() {
		tMin = c.From.UnixMilli()
	}
	if !c.To.IsZero() {
		tMax = c.To.UnixMilli()
	}
	tMin, tMax, vMin, vMax, finite := extent(series, tMin, tMax)
	// The frame.
	b.WriteString(`<rect x="` + num(plot.x0) + `" y="` + num(plot.y0) + `" width="` + num(plot.x1-plot.x0) + `" height="` +
		num(plot.y1-plot.y0) + `" fill="#fff" stroke="` + colGrid + `"/>`)
	drawn := finite && tMax >= tMin
	if !drawn {
		b.WriteString(`<text x="` + num((plot.x0+plot.x1)/2) + `" y="` + num((plot.y0+plot.y1)/2+4) + `" text-anchor="middle" fill="` +
			colMuted + `" font-size="13">no data yet</text>`)
	} else {
		if tMax == tMin {
			tMin, tMax = tMin-30_000, tMax+30_000
		}
		yt := valueTicks(vMin, vMax, c.Unit)
		vMin, vMax = yt.min, yt.max
		sx := func(t int64) float64 {
			return plot.x0 + float64(t-tMin)/float64(tMax-tMin)*(plot.x1-plot.x0)
		}
		sy := func(v float64) float64 { return plot.y1 - (v-vMin)/(vMax-vMin)*(plot.y1-plot.y0) }
		// Value ticks and grid.
		for _, v := range yt.values {
			y := num(sy(v))
			b.WriteString(`<line x1="` + num(plot.x0) + `" x2="` + num(plot.x1) + `" y1="` + y + `" y2="` + y + `" stroke="` + colGrid + `"/>`)
			b.WriteString(`<text x="` + num(plot.x0-5) + `" y="` + num(sy(v)+4) + `" text-anchor="end" fill="` + colMuted + `">` +
				html.EscapeString(yt.label(v)) + `</text>`)
		}
		// Time ticks.
		for _, t := range timeTicks(tMin, tMax, int((plot.x1-plot.x0)/64)) {
			x := num(sx(t.ms))
			b.WriteString(`<line x1="` + x + `" x2="` + x + `" y1="` + num(plot.y1) + `" y2="` + num(plot.y1+4) + `" stroke="` + colMuted + `"/>`)
			b.WriteString(`<text x="` + x + `" y="` + num(plot.y1+15) + `" text-anchor="middle" fill="` + colMuted + `">` + t.label + `</text>`)
		}
		// The lines.
		for i, s := range series {
			b.WriteString(`<path fill="none" stroke="` + Palette[i] + `" stroke-width="1.6" stroke-linejoin="round" stroke-linecap="round"`)
			if d := pathData(s.Points, tMin, tMax, sx, sy); d != "" {
				b.WriteString(` d="` + d + `"`)
			}
			writeData(&b, s)
			b.WriteString(`><title>` + html.EscapeString(s.Label) + `</title></path>`)
		}
	}
	if !drawn {
		// The series still carry their (empty or gap-only) data.
		for _, s := range series {
			b.WriteString(`<path fill="none"`)
			writeData(&b, s)
			b.WriteString(`/>`)
		}
	}
	// The legend.
	for i, it := range items {
		y := float64(h-legendH+6) + float64(it.row*legendRow) + 8
		if i < len(series) {
			b.WriteString(`<line x1="` + strconv.Itoa(it.x) + `" x2="` + strconv.Itoa(it.x+16) + `" y1="` + num(y) + `" y2="` + num(y) +
				`" stroke="` + Palette[i] + `" stroke-width="3"/>`)
			b.WriteString(`<text x="` + strconv.Itoa(it.x+22) + `" y="` + num(y+4) + `" fill="` + colText + `">` + html.EscapeString(it.label) + `</text>`)
		} else {
			b.WriteString(`<text x="` + strconv.Itoa(it.x) + `" y="` + num(y+4) + `" fill="` + colMuted + `">` + html.EscapeString(it.label) + `</text>`)
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

type rect struct{ x0, y0, x1, y1 float64 }

// writeData writes a series' data-label and data-points attributes.
func writeData(b *strings.Builder, s Series) {
	b.WriteString(` data-label="` + html.EscapeString(s.Label) + `" data-points="`)
	var buf []byte
	for i, p := range s.Points {
		if i > 0 {
			buf = append(buf, ' ')
		}
		buf = strconv.AppendInt(buf, p.T.UnixMilli(), 10)
		buf = append(buf, ':')
		buf = strconv.AppendFloat(buf, p.V, 'g', -1, 64)
	}
	b.Write(buf)
	b.WriteByte('"')
}

// pathData is a series' path: a subpath ("M x y x y ...") per run of
// finite points inside [tMin, tMax]; a run of one point is a short dash
// ("M x y h3"). Coordinates are rounded to 0.1 px; a point on the
// previous one's pixel is left out.
func pathData(ps []Point, tMin, tMax int64, sx func(int64) float64, sy func(float64) float64) string {
	if !slices.IsSortedFunc(ps, func(a, b Point) int { return a.T.Compare(b.T) }) {
		ps = slices.SortedStableFunc(slices.Values(ps), func(a, b Point) int { return a.T.Compare(b.T) })
	}
	var d []byte
	run := 0   // points in the current subpath
	start := 0 // where it starts in d
	var lx, ly float64
	end := func() {
		if run == 1 {
			// A lone point: a 3 px dash centred on it (4.6 px with the
			// round caps), so it shows.
			d = append(d[:start], 'M')
			d = strconv.AppendFloat(d, round1(lx-1.5), 'f', -1, 64)
			d = append(d, ' ')
			d = strconv.AppendFloat(d, ly, 'f', -1, 64)
			d = append(d, " h3"...)
		}
		run = 0
	}
	for _, p := range ps {
		t := p.T.UnixMilli()
		if t < tMin || t > tMax {
			continue
		}
		if math.IsNaN(p.V) || math.IsInf(p.V, 0) {
			end()
			continue
		}
		x, y := round1(sx(t)), round1(sy(p.V))
		if run > 0 && x == lx && y == ly {
			continue
		}
		if run == 0 {
			if len(d) > 0 {
				d = append(d, ' ')
			}
			start = len(d)
			d = append(d, 'M')
		} else {
			d = append(d, ' ')
		}
		d = strconv.AppendFloat(d, x, 'f', -1, 64)
		d = append(d, ' ')
		d = strconv.AppendFloat(d, y, 'f', -1, 64)
		lx, ly = x, y
		run++
	}
	end()
	return string(d)
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }

func num(x float64) string { return strconv.FormatFloat(round1(x), 'f', -1, 64) }

// extent is the time range (Unix ms) and the finite value range of the
// series' points within [from, to]: from and to themselves unless one is
// math.MinInt64 or math.MaxInt64, then the points' extent.
func extent(series []Series, from, to int64) (tMin, tMax int64, vMin, vMax float64, finite bool) {
	tMin, tMax = math.MaxInt64, math.MinInt64
	vMin, vMax = math.Inf(1), math.Inf(-1)
	for _, s := range series {
		for _, p := range s.Points {
			t := p.T.UnixMilli()
			if t < from || t > to {
				continue
			}
			tMin, tMax = min(tMin, t), max(tMax, t)
			if math.IsNaN(p.V) || math.IsInf(p.V, 0) {
				continue
			}
			vMin, vMax = min(vMin, p.V), max(vMax, p.V)
			finite = true
		}
	}
	if from != math.MinInt64 {
		tMin = from
	}
	if to != math.MaxInt64 {
		tMax = to
	}
	return tMin, tMax, vMin, vMax, finite
}

// lastValue is the series' last finite value.
func lastValue(ps []Point) (float64, bool) {
	for i := len(ps) - 1; i >= 0; i-- {
		if v := ps[i].V; !math.IsNaN(v) && !math.IsInf(v, 0) {
			return v, true
		}
	}
	return 0, false
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// ticks are a value axis: its range, its tick values and how to label
// them (scaled by div, suffix appended, with decimals digits).
type ticks struct {
	min, max float64
	values   []float64
	div      float64
	suffix   string
	decimals int
}

func (t ticks) label(v float64) string {
	if math.Abs(v) < t.div*1e-9 {
		return "0"
	}
	return strconv.FormatFloat(v/t.div, 'f', t.decimals, 64) + t.suffix
}

// valueTicks picks 3 to 6 round ticks covering [lo, hi] (0 included when
// all values are positive), in the unit's scale: the largest magnitude
// picks the prefix (k, M, … or KiB, MiB, …), the step is 1, 2, 2.5 or 5
// times a power of ten of it.
func valueTicks(lo, hi float64, unit string) ticks {
	lo = min(lo, 0)
	if hi <= lo {
		hi = lo + 1
	}
	div, suffix := scale(max(math.Abs(lo), math.Abs(hi)), unit)
	span := (hi - lo) / div
	raw := span / 4
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	step := p
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= raw {
			step = m * p
			break
		}
	}
	decimals := 0
	if step < 1 {
		decimals = int(math.Ceil(-math.Log10(step) - 1e-9))
		if r := step * math.Pow(10, float64(decimals)); math.Abs(r-math.Round(r)) > 1e-9 {
			decimals++ // 2.5 × 10^-k
		}
	} else if step != math.Trunc(step) {
		decimals = 1
	}
	t := ticks{div: div, suffix: suffix, decimals: decimals}
	first := math.Floor(lo/div/step+1e-9) * step
	last := math.Ceil(hi/div/step-1e-9) * step
	for i := 0; ; i++ {
		v := first + float64(i)*step
		if v > last+step/2 || i > 20 {
			break
		}
		t.values = append(t.values, v*div)
	}
	t.min, t.max = first*div, last*div
	if t.max <= t.min {
		t.max = t.min + step*div
	}
	return t
}

func binary(unit string) bool { return unit == "bytes" || strings.HasPrefix(unit, "bytes/") }

// scale is the divisor and suffix for a magnitude in unit.
func scale(mag float64, unit string) (float64, string) {
	if binary(unit) {
		suffixes := []string{" B", " KiB", " MiB", " GiB", " TiB", " PiB", " EiB"}
		div := 1.0
		i := 0
		for i < len(suffixes)-1 && mag >= div*1024 {
			div *= 1024
			i++
		}
		return div, suffixes[i]
	}
	suffixes := []string{"", "k", "M", "G", "T", "P", "E"}
	div := 1.0
	i := 0
	for i < len(suffixes)-1 && mag >= div*1000 {
		div *= 1000
		i++
	}
	return div, suffixes[i]
}

// Human is v in human units: 1000-based prefixes (950, 1.2k, 34.5M), or
// 1024-based for the units "bytes" and "bytes/…" (512 B, 1.5 MiB), with
// three significant digits at most.
func Human(v float64, unit string) string {
	if math.IsNaN(v) {
		return "NaN"
	}
	if math.IsInf(v, 0) {
		if v > 0 {
			return "+Inf"
		}
		return "-Inf"
	}
	div, suffix := scale(math.Abs(v), unit)
	x := v / div
	var s string
	switch a := math.Abs(x); {
	case a == 0:
		s = "0"
	case a < 1:
		s = strconv.FormatFloat(x, 'g', 3, 64)
	case a < 10:
		s = strconv.FormatFloat(x, 'f', 2, 64)
	case a < 100:
		s = strconv.FormatFloat(x, 'f', 1, 64)
	default:
		s = strconv.FormatFloat(x, 'f', 0, 64)
	}
	if strings.Contains(s, ".") && !strings.ContainsAny(s, "e") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s + suffix
}

// Format is Human with the unit: "1.2k msg/s", "1.5 MiB/s", "3 GiB".
func Format(v float64, unit string) string {
	s := Human(v, unit)
	switch {
	case unit == "" || unit == "bytes":
		return s
	case binary(unit):
		return s + unit[len("bytes"):]
	default:
		return s + " " + unit
	}
}

type timeTick struct {
	ms    int64
	label string
}

var tickSteps = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour}

// timeTicks picks round UTC times in [tMin, tMax] (Unix ms), at most
// maxTicks of them (at least 2): HH:MM, or HH:MM:SS under a minute apart;
// a tick at midnight over a span of days shows the date (Jan 2).
func timeTicks(tMin, tMax int64, maxTicks int) []timeTick {
	maxTicks = max(maxTicks, 2)
	span := time.Duration(tMax-tMin) * time.Millisecond
	step := tickSteps[len(tickSteps)-1]
	for _, s := range tickSteps {
		if span/s <= time.Duration(maxTicks-1) {
			step = s
			break
		}
	}
	for span/step > time.Duration(maxTicks-1) {
		step *= 2
	}
	ms := step.Milliseconds()
	var out []timeTick
	for t := ceilDiv(tMin, ms) * ms; t <= tMax; t += ms {
		tm := time.UnixMilli(t).UTC()
		var label string
		switch {
		case step < time.Minute:
			label = tm.Format("15:04:05")
		case span > 24*time.Hour && tm.Hour() == 0 && tm.Minute() == 0:
			label = tm.Format("Jan 2")
		default:
			label = tm.Format("15:04")
		}
		out = append(out, timeTick{ms: t, label: label})
	}
	return out
}

func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a > 0) == (b > 0) {
		q++
	}
	return q
}
