package chart

import (
	"encoding/xml"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

var base = time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)

// series makes a series of vs, 10 s apart from base.
func series(label string, vs ...float64) Series {
	s := Series{Label: label}
	for i, v := range vs {
		s.Points = append(s.Points, Point{T: base.Add(time.Duration(i) * 10 * time.Second), V: v})
	}
	return s
}

// element is one element of a parsed chart.
type element struct {
	name  string
	attrs map[string]string
	text  string
}

// parse reads a chart as XML (strictly: it must be well formed) and
// returns its elements in order.
func parse(t *testing.T, out string) []element {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(out))
	d.Strict = true
	var els []element
	var stack []int
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well formed: %v\n%s", err, out)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			e := element{name: tok.Name.Local, attrs: map[string]string{}}
			for _, a := range tok.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			els = append(els, e)
			stack = append(stack, len(els)-1)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				els[stack[len(stack)-1]].text += string(tok)
			}
		}
	}
	return els
}

// paths returns the chart's series paths.
func paths(els []element) []element {
	var out []element
	for _, e := range els {
		if _, ok := e.attrs["data-points"]; ok && e.name == "path" {
			out = append(out, e)
		}
	}
	return out
}

// checkSafe fails on anything a strict CSP would refuse or that could run:
// an element outside the few SVG ones drawn, an event handler, a style, a
// link or URL.
func checkSafe(t *testing.T, out string, els []element) {
	t.Helper()
	allowed := map[string]bool{"svg": true, "title": true, "text": true, "tspan": true, "rect": true, "line": true, "path": true}
	for _, e := range els {
		if !allowed[e.name] {
			t.Fatalf("element <%s>", e.name)
		}
		for a := range e.attrs {
			if strings.HasPrefix(strings.ToLower(a), "on") || a == "style" || strings.Contains(a, "href") || a == "src" {
				t.Fatalf("attribute %s on <%s>", a, e.name)
			}
		}
	}
	for _, bad := range []string{"<script", "<style", "url(", "http:", "https:", "javascript:", "<foreignObject", "<image", "<use"} {
		if strings.Contains(strings.ToLower(out), strings.ToLower(bad)) {
			t.Fatalf("output holds %q", bad)
		}
	}
}

func TestEscaping(t *testing.T) {
	label := `<script>alert("x")</script>' onmouseover="alert(1)" &amp;`
	c := Chart{Title: `</svg><script>alert(1)</script>`, Unit: `"><b>bold</b>`,
		Series: []Series{series(label, 1, 2, 3), series(`"quoted" & 'single'`, 3, 2, 1)}}
	out := string(Line(c))
	els := parse(t, out)
	checkSafe(t, out, els)
	ps := paths(els)
	if len(ps) != 2 || ps[0].attrs["data-label"] != label || ps[1].attrs["data-label"] != `"quoted" & 'single'` {
		t.Fatalf("paths %+v", ps)
	}
	// Each path's <title> (its tooltip) is its label.
	for i, e := range els {
		if e.name == "path" && e.attrs["data-label"] == label && (i+1 == len(els) || els[i+1].name != "title" || els[i+1].text != label) {
			t.Fatalf("path title: %+v", els[i+1])
		}
	}
	// The title, unit and legend show the texts as given.
	var texts []string
	for _, e := range els {
		if e.name == "text" || e.name == "title" {
			texts = append(texts, e.text)
		}
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{c.Title, c.Unit, `<script>alert("x")</script>' onmouseove…`} {
		if !strings.Contains(all, want) {
			t.Fatalf("texts lack %q:\n%s", want, all)
		}
	}
	if els[0].attrs["aria-label"] != c.Title {
		t.Fatalf("aria-label %q", els[0].attrs["aria-label"])
	}
}

func TestNaNGapsSplitTheLine(t *testing.T) {
	nan := math.NaN()
	out := string(Line(Chart{Series: []Series{series("a", 1, 2, nan, 3, 4, nan, nan, 5, math.Inf(1), 6, 7)}}))
	d := paths(parse(t, out))[0].attrs["d"]
	// Runs: [1 2] [3 4] [5] [6 7]; the lone 5 is a short dash.
	subs := strings.Split(d, "M")[1:]
	if len(subs) != 4 {
		t.Fatalf("%d subpaths in %q, want 4", len(subs), d)
	}
	for i, n := range []int{4, 4, 2, 4} {
		f := strings.Fields(subs[i])
		if i == 2 {
			if len(f) != 3 || f[2] != "h3" {
				t.Fatalf("lone point: %q", subs[i])
			}
			continue
		}
		if len(f) != n {
			t.Fatalf("subpath %d: %q, want %d numbers", i, subs[i], n)
		}
	}
	// Coordinates are rounded to 0.1 px.
	for _, f := range strings.Fields(strings.ReplaceAll(d, "M", " ")) {
		if f == "h3" {
			continue
		}
		if i := strings.IndexByte(f, '.'); i >= 0 && len(f)-i-1 > 1 {
			t.Fatalf("coordinate %q has more than one decimal", f)
		}
	}
	// All gaps: no line, still the data.
	out = string(Line(Chart{Series: []Series{series("a", nan, nan)}}))
	if !strings.Contains(out, "no data yet") {
		t.Fatal("a series of gaps is not 'no data yet'")
	}
	ps := paths(parse(t, out))
	if len(ps) != 1 || ps[0].attrs["d"] != "" || ps[0].attrs["data-points"] == "" {
		t.Fatalf("gap-only series: %+v", ps)
	}
}

func TestDataPointsRoundTrip(t *testing.T) {
	vs := []float64{0, 1, -0.5, 1.0 / 3, 123456789.125, 1e-300, 6.02214076e23, math.NaN(), math.Inf(1), math.Inf(-1), math.MaxFloat64, 42}
	s := series(`topic "x"`, vs...)
	s.Points[3].T = s.Points[3].T.Add(123 * time.Millisecond)
	out := string(Line(Chart{Unit: "bytes/s", Series: []Series{s, series("b", 7, 8)}}))
	ps := paths(parse(t, out))
	if len(ps) != 2 {
		t.Fatalf("%d paths", len(ps))
	}
	got := parsePoints(t, ps[0].attrs["data-points"])
	if len(got) != len(s.Points) {
		t.Fatalf("%d points, want %d", len(got), len(s.Points))
	}
	for i, p := range got {
		w := s.Points[i]
		same := p.V == w.V || (math.IsNaN(p.V) && math.IsNaN(w.V))
		if !p.T.Equal(w.T) || !same || math.Signbit(p.V) != math.Signbit(w.V) {
			t.Fatalf("point %d: %v:%v, want %v:%v", i, p.T, p.V, w.T, w.V)
		}
	}
	if ps[1].attrs["data-points"] != strconv.FormatInt(base.UnixMilli(), 10)+":7 "+strconv.FormatInt(base.Add(10*time.Second).UnixMilli(), 10)+":8" {
		t.Fatalf("data-points %q", ps[1].attrs["data-points"])
	}
}

// parsePoints reads a data-points attribute back.
func parsePoints(t *testing.T, s string) []Point {
	t.Helper()
	var out []Point
	for _, f := range strings.Fields(s) {
		ms, v, ok := strings.Cut(f, ":")
		if !ok {
			t.Fatalf("point %q", f)
		}
		n, err := strconv.ParseInt(ms, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Point{T: time.UnixMilli(n), V: x})
	}
	return out
}

func TestHumanAndFormat(t *testing.T) {
	for _, c := range []struct {
		v          float64
		unit, want string
		format     string
	}{
		{0, "", "0", "0"},
		{950, "msg/s", "950", "950 msg/s"},
		{1234, "msg/s", "1.23k", "1.23k msg/s"},
		{1200, "", "1.2k", "1.2k"},
		{3.4e6, "", "3.4M", "3.4M"},
		{12345678, "", "12.3M", "12.3M"},
		{999.5e3, "", "1000k", "1000k"},
		{2.5e9, "msg", "2.5G", "2.5G msg"},
		{0.05, "msg/s", "0.05", "0.05 msg/s"},
		{0.123456, "", "0.123", "0.123"},
		{-1500, "", "-1.5k", "-1.5k"},
		{512, "bytes", "512 B", "512 B"},
		{1536, "bytes", "1.5 KiB", "1.5 KiB"},
		{1.5 * (1 << 20), "bytes/s", "1.5 MiB", "1.5 MiB/s"},
		{3 * (1 << 30), "bytes", "3 GiB", "3 GiB"},
		{1e3, "bytes", "1000 B", "1000 B"},
		{math.NaN(), "", "NaN", "NaN"},
	} {
		if got := Human(c.v, c.unit); got != c.want {
			t.Errorf("Human(%v, %q) = %q, want %q", c.v, c.unit, got, c.want)
		}
		if got := Format(c.v, c.unit); got != c.format {
			t.Errorf("Format(%v, %q) = %q, want %q", c.v, c.unit, got, c.format)
		}
	}
}

func TestValueTicks(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		unit   string
		want   string
	}{
		{0, 1.9 * (1 << 20), "bytes/s", "0 0.5_MiB 1.0_MiB 1.5_MiB 2.0_MiB"},
		{100, 3400, "msg/s", "0 1k 2k 3k 4k"},
		{0, 0.05, "", "0 0.02 0.04 0.06"},
		{0, 0.9, "", "0 0.25 0.50 0.75 1.00"},
		{-5, 5, "", "-5.0 -2.5 0 2.5 5.0"},
		{0, 0, "", "0 0.25 0.50 0.75 1.00"},
		{7, 7, "", "0 2 4 6 8"},
		{0, 2.4e9, "", "0 1G 2G 3G"},
		{0, 5 * (1 << 30), "bytes", "0 2_GiB 4_GiB 6_GiB"},
		{0, 1.9e9, "", "0 0.5G 1.0G 1.5G 2.0G"},
	} {
		tk := valueTicks(c.lo, c.hi, c.unit)
		var got []string
		for _, v := range tk.values {
			got = append(got, strings.ReplaceAll(tk.label(v), " ", "_"))
		}
		if g := strings.Join(got, " "); g != c.want {
			t.Errorf("ticks(%v, %v, %q) = %s, want %s", c.lo, c.hi, c.unit, g, c.want)
		}
		if tk.min > min(c.lo, 0) || tk.max < c.hi {
			t.Errorf("ticks(%v, %v) range [%v, %v] does not cover", c.lo, c.hi, tk.min, tk.max)
		}
	}
}

func TestTimeTicks(t *testing.T) {
	label := func(from, to time.Time, n int) string {
		var out []string
		for _, tk := range timeTicks(from.UnixMilli(), to.UnixMilli(), n) {
			out = append(out, tk.label)
		}
		return strings.Join(out, " ")
	}
	for _, c := range []struct {
		from, to time.Time
		n        int
		want     string
	}{
		{base, base.Add(time.Hour), 8, "09:00 09:10 09:20 09:30 09:40 09:50 10:00"},
		{base.Add(-3 * time.Minute), base.Add(57 * time.Minute), 8, "09:00 09:10 09:20 09:30 09:40 09:50"},
		{base, base.Add(2 * time.Minute), 8, "09:00:00 09:00:30 09:01:00 09:01:30 09:02:00"},
		{base, base.Add(24 * time.Hour), 8, "12:00 18:00 00:00 06:00"},
		{base.Add(-9 * time.Hour), base.Add(39 * time.Hour), 8, "Dec 7 12:00 Dec 8 12:00 Dec 9"},
		// In a time zone other than UTC: the labels are UTC.
		{base.In(time.FixedZone("X", 5*3600+1800)), base.Add(time.Hour).In(time.FixedZone("X", 5*3600+1800)), 4, "09:00 09:30 10:00"},
	} {
		if got := label(c.from, c.to, c.n); got != c.want {
			t.Errorf("ticks %v–%v /%d = %q, want %q", c.from, c.to, c.n, got, c.want)
		}
	}
}

func TestNoData(t *testing.T) {
	for _, c := range []Chart{{Title: "Lag"}, {Title: "Lag", Series: []Series{{Label: "a"}}}} {
		out := string(Line(c))
		els := parse(t, out)
		checkSafe(t, out, els)
		if !strings.Contains(out, ">no data yet<") || !strings.Contains(out, ">Lag<") {
			t.Fatalf("empty chart: %s", out)
		}
	}
}

func TestManySeriesAndWindow(t *testing.T) {
	var ss []Series
	for i := range 10 {
		ss = append(ss, series("s"+strconv.Itoa(i), float64(i), float64(i+1), float64(i+2)))
	}
	// The window holds the last two points only.
	out := string(Line(Chart{Series: ss, From: base.Add(10 * time.Second), To: base.Add(20 * time.Second)}))
	els := parse(t, out)
	checkSafe(t, out, els)
	ps := paths(els)
	if len(ps) != MaxSeries {
		t.Fatalf("%d paths, want %d", len(ps), MaxSeries)
	}
	colours := map[string]bool{}
	for _, p := range ps {
		colours[p.attrs["stroke"]] = true
		// "Mx y x y": two points.
		if f := strings.Fields(p.attrs["d"]); len(f) != 4 || strings.Count(p.attrs["d"], "M") != 1 {
			t.Fatalf("path %q: want the 2 points in the window", p.attrs["d"])
		}
		if len(parsePoints(t, p.attrs["data-points"])) != 3 {
			t.Fatal("data-points should hold every point, in the window or not")
		}
	}
	if len(colours) != MaxSeries {
		t.Fatalf("%d colours", len(colours))
	}
	if !strings.Contains(out, "+2 more not drawn") {
		t.Fatal("no word of the series not drawn")
	}
	// The first tick is at the window's start.
	if !strings.Contains(out, ">09:00:10<") {
		t.Fatalf("ticks: %s", out)
	}
}

// TestCompact: a day of a topic (636 points, as a 24 h history query
// returns) stays small.
func TestCompact(t *testing.T) {
	var s Series
	for i := range 636 {
		s.Points = append(s.Points, Point{T: base.Add(time.Duration(i) * 10 * time.Second), V: 1e6 + float64(i%37)*1234.5})
	}
	out := string(Line(Chart{Title: "in", Unit: "msg/s", Series: []Series{s}}))
	if len(out) > 40_000 {
		t.Fatalf("%d bytes for one series of 636 points", len(out))
	}
	t.Logf("one series of 636 points: %d bytes", len(out))
}
