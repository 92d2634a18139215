// Package chart draws the web console's line charts as inline SVG, on the
// server: the pages run no script, and the console's Content-Security-Policy
// (default-src 'none'; style-src 'self') allows no inline style either.
//
// Line returns a template.HTML holding one <svg class="chart"> element:
//
//   - a title, with the unit after it, and "UTC" at the top right;
//   - a time axis with 2 to about 9 round UTC ticks (HH:MM; HH:MM:SS when
//     they are less than a minute apart; the date, "Jan 2", at midnight
//     over spans of more than a day);
//   - a value axis from 0 (or below, for negative values) with 3 to 6
//     round ticks in human units: 1000-based (250k, 1.5M) or, when Unit
//     is "bytes" or "bytes/…", 1024-based (512 B, 1.5 MiB, 2 GiB);
//   - one <path> per series, in the fixed Palette's colour, at most
//     MaxSeries (8) of them (the legend counts the others "not drawn");
//     NaN and infinite values are gaps: the path's subpath ends there, and
//     a lone point between gaps is a short dash. Coordinates are rounded
//     to 0.1 px and a point on the previous one's pixel is left out;
//   - a legend under the plot: each series' colour, label (cut at 40
//     characters; the path's <title> tooltip has it whole) and latest
//     value (Format).
//
// With no finite point in the window the plot says "no data yet".
//
// Each series' path carries its data for tests and tools:
//
//	data-label="the series' label"
//	data-points="unixMillis:value unixMillis:value ..."
//
// data-points holds every point of the series as given (in the time window
// or not, gaps included), the value as strconv.FormatFloat(v, 'g', -1, 64)
// ("NaN" for a gap), so strconv.ParseFloat reads back exactly the float64
// the console charted. A browser test selects "svg.chart path[data-points]".
//
// What the SVG never holds: a script, a style attribute or element, an
// event handler attribute, a link, a URL or an external font (only
// presentation attributes such as fill, stroke and font-size, and the
// system font stack). Every text (title, unit, labels) is HTML-escaped,
// labels being topic and group names that users choose. There is no xmlns
// attribute: the SVG is meant to be inline in an HTML page (HTML parsers
// give it the SVG namespace).
//
// The console's stylesheet may size it (svg.chart { max-width: 100%;
// height: auto; }): the SVG has width, height and viewBox.
//
// Use, with a console/history store (history.Point and chart.Point have
// the same fields):
//
//	var lines []chart.Series
//	for _, s := range store.Query("rocketmq_messages_in_total", map[string]string{"topic": topic}, from, to) {
//		l := chart.Series{Label: s.Labels["topic"]}
//		for _, p := range s.Points {
//			l.Points = append(l.Points, chart.Point(p))
//		}
//		lines = append(lines, l)
//	}
//	svg := chart.Line(chart.Chart{Title: "Messages in", Unit: "msg/s", From: from, To: to, Series: lines})
package chart
