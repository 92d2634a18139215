package console

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/console/chart"
	"github.com/stratamq/stratamq/console/history"
	"github.com/stratamq/stratamq/msgtrace"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// The pages: each reads what it shows from the Broker and hands it to its
// template (templates/<name>.html inside templates/layout.html).

type overviewData struct {
	Status  broker.ConsoleStatus
	Uptime  time.Duration
	Version string // the binary's
}

func (h *Handler) overview(ctx context.Context, b Broker, r *http.Request) (string, any, error) {
	if _, err := parseParams(r.URL.RawQuery); err != nil {
		return "", nil, err
	}
	st := b.ConsoleStatus()
	return "overview", overviewData{Status: st, Uptime: time.Since(st.Since).Round(time.Second), Version: h.cfg.Version}, nil
}

type topicsData struct {
	User, System []broker.ConsoleTopic
}

func (h *Handler) topics(ctx context.Context, b Broker, r *http.Request) (string, any, error) {
	if _, err := parseParams(r.URL.RawQuery); err != nil {
		return "", nil, err
	}
	ts, err := b.ConsoleTopics(ctx, "", false)
	if err != nil {
		return "", nil, err
	}
	var d topicsData
	for _, t := range ts {
		if t.System {
			d.System = append(d.System, t)
		} else {
			d.User = append(d.User, t)
		}
	}
	return "topics", d, nil
}

type topicData struct {
	Topic  broker.ConsoleTopic
	Bucket bool // the broker has one: show the queues' bucket ranges
	Groups []groupOnTopic
}

// groupOnTopic is a group's committed offsets on one topic.
type groupOnTopic struct {
	Name   string
	Lag    int64
	Queues []broker.ConsoleGroupQueue
}

func (h *Handler) topic(ctx context.Context, b Broker, r *http.Request) (string, any, error) {
	p, err := parseParams(r.URL.RawQuery, "topic")
	if err != nil {
		return "", nil, err
	}
	name, err := p.topic("topic")
	if err != nil {
		return "", nil, err
	}
	ts, err := b.ConsoleTopics(ctx, name, true)
	if err != nil {
		return "", nil, err
	}
	if len(ts) == 0 {
		return "", nil, notFound("the broker has no topic %s", quote(name))
	}
	d := topicData{Topic: ts[0], Bucket: b.ConsoleStatus().Bucket}
	for _, g := range b.ConsoleGroups() {
		og := groupOnTopic{Name: g.Name}
		for _, q := range g.Queues {
			if q.Topic == name {
				og.Queues = append(og.Queues, q)
				og.Lag += q.Lag
			}
		}
		if len(og.Queues) > 0 {
			d.Groups = append(d.Groups, og)
		}
	}
	return "topic", d, nil
}

type groupsData struct {
	Filter string
	Groups []broker.ConsoleGroup
	// Replay is, for one group (Filter), its progress through each topic's
	// history: how much of what it has still to read is only in the bucket.
	Replay []replayRow
}

// replayRow is one group's progress on one topic.
type replayRow struct {
	Topic      string
	Lag        int64 // messages still to read
	BucketOnly int64 // of those, only in the bucket (below the local range)
	Queues     int   // queues reading bucket-only history
	Rate       string
	ETA        string // until the bucket-only part is read, at Rate
}

func (h *Handler) groups(ctx context.Context, b Broker, r *http.Request) (string, any, error) {
	p, err := parseParams(r.URL.RawQuery, "group")
	if err != nil {
		return "", nil, err
	}
	d := groupsData{}
	if p.has("group") {
		if d.Filter, err = p.group("group"); err != nil {
			return "", nil, err
		}
	}
	for _, g := range b.ConsoleGroups() {
		if d.Filter == "" || g.Name == d.Filter {
			d.Groups = append(d.Groups, g)
		}
	}
	if d.Filter != "" && len(d.Groups) == 0 {
		return "", nil, notFound("the broker knows no consumer group %s", quote(d.Filter))
	}
	if d.Filter != "" {
		if d.Replay, err = h.replay(ctx, b, d.Groups[0]); err != nil {
			return "", nil, err
		}
	}
	return "groups", d, nil
}

// replay is group g's progress through each topic's history: per topic,
// the messages it has still to read that live only in the bucket (below
// the queue's local range) and, from the history, the rate its committed
// offsets moved at over the last five minutes.
func (h *Handler) replay(ctx context.Context, b Broker, g broker.ConsoleGroup) ([]replayRow, error) {
	by := map[string]*replayRow{}
	var order []string
	for _, q := range g.Queues {
		row := by[q.Topic]
		if row == nil {
			row = &replayRow{Topic: q.Topic, Rate: "-", ETA: "-"}
			by[q.Topic] = row
			order = append(order, q.Topic)
		}
		local, err := b.ConsoleLocalFrom(ctx, q.Topic, q.QueueID)
		if err != nil {
			return nil, err
		}
		row.Lag += q.Lag
		if from := max(q.Committed, q.Min); from < local {
			row.BucketOnly += local - from
			row.Queues++
		}
	}
	var out []replayRow
	now := h.cfg.Now()
	for _, t := range order {
		row := by[t]
		if st := h.cfg.History; st != nil {
			s := convert(t, history.Sum(st.Query("stratamq_consumer_offset", map[string]string{"consumer_group": g.Name, "topic": t}, now.Add(-15*time.Minute), now)))
			if r, ok := rateOver(s.Points, 5*time.Minute); ok {
				row.Rate = chart.Format(r, "msg/s")
				if row.BucketOnly > 0 && r > 0 {
					row.ETA = time.Duration(float64(row.BucketOnly) / r * float64(time.Second)).Round(time.Second).String()
				}
			}
		}
		out = append(out, *row)
	}
	return out, nil
}

type tierData struct {
	Status   broker.TierStatus
	Requests broker.TierRequests
}

func (h *Handler) tier(ctx context.Context, b Broker, r *http.Request) (string, any, error) {
	if _, err := parseParams(r.URL.RawQuery); err != nil {
		return "", nil, err
	}
	st := b.TierStatus(ctx)
	if err := ctx.Err(); err != nil {
		return "", nil, err
	}
	return "tier", tierData{Status: st, Requests: b.TierRequests()}, nil
}

// messagesData is the browser's form (as given) and what it found.
type messagesData struct {
	Form     params
	Topics   []string // for the form's topic list
	Searched bool
	How      string               // what was searched, in words
	Queue    *broker.ConsoleQueue // its min and max only (LocalFrom is not looked up here)
	Messages []messageView
	// Paging through a queue: the previous and next page's first offsets
	// (-1: none).
	Prev, Next int64
	N          int64
	// A message's trace (?trace=msgId): its legs, read from TraceTopic.
	TraceOf    string
	TraceTopic string
	Trace      []msgtrace.Leg
}

// messageView is a message with its body made ready to show.
type messageView struct {
	broker.ConsoleMessage
	Text string   // the preview as text, when it is printable UTF-8
	Hex  []string // else a hex dump of it, 16 bytes a line
	// UniqKey is the client's msgId (UNIQ_KEY), which its trace is found by.
	UniqKey string
}

func (h *Handler) messages(ctx context.Context, b Broker, r *http.Request) (string, any, error) {
	if h.cfg.NoBrowse != "" {
		return "", nil, forbidden("the message browser is off: %s", h.cfg.NoBrowse)
	}
	// With an ACL: a signed-in user with SUB on each topic shown (canRead).
	v := h.viewerOf(b, r)
	if v.acl && v.sess == nil {
		return "", nil, &httpError{http.StatusUnauthorized, "the broker checks requests (ACL): sign in with one of its accounts to browse messages"}
	}
	p, err := parseParams(r.URL.RawQuery, "topic", "queue", "offset", "time", "key", "msgId", "n", "trace", "traceTopic")
	if err != nil {
		return "", nil, err
	}
	d := messagesData{Form: p, Prev: -1, Next: -1}
	ts, err := b.ConsoleTopics(ctx, "", false)
	if err != nil {
		return "", nil, err
	}
	for _, t := range ts {
		d.Topics = append(d.Topics, t.Name)
	}
	if d.N, err = p.int("n", 1, broker.ConsoleMaxMessages, defaultPage); err != nil {
		return "", nil, err
	}
	if len(p) == 0 || len(p) == 1 && p.has("n") {
		return "messages", d, nil // the form alone
	}
	d.Searched = true
	// A page reading messages waits for a slot (maxMessagePages) as long
	// as its request lives.
	select {
	case h.sem <- struct{}{}:
		defer func() { <-h.sem }()
	case <-ctx.Done():
		return "", nil, ctx.Err()
	}
	const preview = broker.ConsoleMaxPreview
	var msgs []broker.ConsoleMessage
	switch {
	case p.has("trace"): // a message's trace (broker.ConsoleTrace)
		if err := only(p, "trace", "traceTopic", "n"); err != nil {
			return "", nil, err
		}
		id, err := p.key("trace")
		if err != nil {
			return "", nil, err
		}
		topic := ""
		if p.has("traceTopic") {
			if topic, err = p.topic("traceTopic"); err != nil {
				return "", nil, err
			}
			if err := h.canRead(ctx, b, r, v, topic); err != nil { // before anything is read
				return "", nil, err
			}
		}
		if d.Trace, d.TraceTopic, err = b.ConsoleTrace(ctx, id, topic); err != nil {
			return "", nil, err
		}
		if err := h.canRead(ctx, b, r, v, d.TraceTopic); err != nil {
			return "", nil, err
		}
		d.TraceOf = id
		d.How = fmt.Sprintf("the trace of message %s in trace topic %s", id, d.TraceTopic)
	case p.has("msgId"):
		if err := only(p, "msgId", "n", "topic"); err != nil {
			return "", nil, err
		}
		id, err := p.msgID("msgId")
		if err != nil {
			return "", nil, err
		}
		// With an ACL the broker decides first (VIEW_MESSAGE_BY_ID as the
		// user: SUB on the message's own topic), and a refusal reads as a
		// missing message: the page never says which topic an id is in.
		if v.acl {
			_, phys, derr := store.DecodeMessageID(id)
			if derr != nil {
				return "", nil, notFound("no message with id %s on this broker", id)
			}
			req := remoting.NewRequest(remoting.ViewMessageByID, (&remoting.ViewMessageRequestHeader{Offset: phys}).Encode(), nil)
			if _, err := ok(b.ConsoleInvoke(ctx, remoteAddr(r), v.sess.user, v.sess.secret, req)); err != nil {
				return "", nil, notFound("no message with id %s on this broker", id)
			}
		}
		m, err := b.ConsoleMessageByID(ctx, id, preview)
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrCorrupt) {
			return "", nil, notFound("no message with id %s on this broker", id)
		}
		if err != nil {
			return "", nil, err
		}
		if err := h.canRead(ctx, b, r, v, m.Topic); err != nil {
			return "", nil, err
		}
		d.How = "message id " + id
		msgs = []broker.ConsoleMessage{m}
	case p.has("key"):
		if err := only(p, "key", "topic", "n"); err != nil {
			return "", nil, err
		}
		topic, err := p.topic("topic")
		if err != nil {
			return "", nil, err
		}
		key, err := p.key("key")
		if err != nil {
			return "", nil, err
		}
		if err := h.canRead(ctx, b, r, v, topic); err != nil {
			return "", nil, err
		}
		if msgs, err = b.ConsoleMessagesByKey(ctx, topic, key, int(d.N), preview); err != nil {
			return "", nil, err
		}
		d.How = fmt.Sprintf("key %q in topic %s (the newest %d at most)", key, topic, d.N)
	default:
		if p.has("offset") && p.has("time") {
			return "", nil, badRequest("give an offset or a time, not both")
		}
		topic, err := p.topic("topic")
		if err != nil {
			return "", nil, err
		}
		if err := h.canRead(ctx, b, r, v, topic); err != nil {
			return "", nil, err
		}
		ts, err := b.ConsoleTopics(ctx, topic, false)
		if err != nil {
			return "", nil, err
		}
		if len(ts) == 0 {
			return "", nil, notFound("the broker has no topic %s", quote(topic))
		}
		if !p.has("queue") {
			return "", nil, badRequest("parameter queue is missing: browsing by offset or time reads one queue (0..%d)", len(ts[0].Queues)-1)
		}
		q, err := p.int("queue", 0, int64(len(ts[0].Queues))-1, 0)
		if err != nil {
			return "", nil, err
		}
		cq := ts[0].Queues[q]
		d.Queue = &cq
		from := cq.Min
		d.How = fmt.Sprintf("queue %d of %s from its first offset", q, topic)
		switch {
		case p.has("time"):
			ms, err := p.timeMillis("time")
			if err != nil {
				return "", nil, err
			}
			if from, err = b.ConsoleOffsetAtTime(ctx, topic, int32(q), ms); err != nil {
				return "", nil, err
			}
			d.How = fmt.Sprintf("queue %d of %s from the first message stored at or after %s (offset %d)", q, topic, fmtMillis(ms), from)
		case p.has("offset"):
			if from, err = p.int("offset", 0, 1<<62, 0); err != nil {
				return "", nil, err
			}
			d.How = fmt.Sprintf("queue %d of %s from offset %d", q, topic, from)
		}
		var next int64
		if msgs, next, err = b.ConsoleMessages(ctx, topic, int32(q), from, int(d.N), preview); err != nil {
			return "", nil, err
		}
		if next < cq.Max {
			d.Next = next
		}
		if from > cq.Min {
			d.Prev = max(from-d.N, cq.Min)
		}
	}
	for _, m := range msgs {
		d.Messages = append(d.Messages, view(m))
	}
	return "messages", d, nil
}

// only refuses parameters a search mode does not take.
func only(p params, allowed ...string) error {
	for k := range p {
		ok := false
		for _, a := range allowed {
			ok = ok || k == a
		}
		if !ok {
			return badRequest("parameter %s does not go with %s: search by one of offset, time, key or msgId", k, allowed[0])
		}
	}
	return nil
}

func view(m broker.ConsoleMessage) messageView {
	v := messageView{ConsoleMessage: m}
	for _, p := range m.Properties {
		if p.Key == "UNIQ_KEY" {
			v.UniqKey = p.Value
		}
	}
	if printable(m.Body) {
		v.Text = string(m.Body)
		return v
	}
	for i := 0; i < len(m.Body); i += 16 {
		line := m.Body[i:min(i+16, len(m.Body))]
		var sb strings.Builder
		fmt.Fprintf(&sb, "%06x  ", i)
		for j := range 16 {
			if j < len(line) {
				fmt.Fprintf(&sb, "%02x ", line[j])
			} else {
				sb.WriteString("   ")
			}
		}
		sb.WriteString(" ")
		for _, c := range line {
			if c >= 0x20 && c < 0x7f {
				sb.WriteByte(c)
			} else {
				sb.WriteByte('.')
			}
		}
		v.Hex = append(v.Hex, sb.String())
	}
	return v
}

// printable: UTF-8 text without control characters other than tab and
// newlines.
func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if r == '\n' || r == '\r' || r == '\t' {
			continue
		}
		if !unicode.IsPrint(r) && !unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

func fmtMillis(ms int64) string {
	if ms <= 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05.000 UTC")
}

func fmtBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, u := float64(n), ""
	for _, s := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		v /= unit
		u = s
		if v < unit {
			break
		}
	}
	return fmt.Sprintf("%.1f %s", v, u)
}

var funcs = template.FuncMap{
	"ms":    fmtMillis,
	"bytes": fmtBytes,
	"time": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"secs":     func(s float64) string { return fmt.Sprintf("%.1f s", s) },
	"sub":      func(a, b int64) int64 { return a - b },
	"timeline": timeline,
}

// timeline draws one queue's offsets [min, max) as a bar: the part only
// in the bucket (below localFrom) and the local part, with a tick where
// the bucket's copy ends (bucketTo).
func timeline(mn, localFrom, bucketTo, mx int64) template.HTML {
	const w, h = 240.0, 14.0
	if mx <= mn {
		return template.HTML(`<svg class="timeline" width="240" height="14" role="img" aria-label="empty"><rect x="0" y="3" width="240" height="8" fill="#eef0f4"/></svg>`)
	}
	x := func(o int64) float64 { return math.Round(float64(min(max(o, mn), mx)-mn)/float64(mx-mn)*w*10) / 10 }
	lf, bt := x(localFrom), x(bucketTo)
	return template.HTML(fmt.Sprintf(`<svg class="timeline" width="240" height="14" role="img" aria-label="offsets %d to %d: %d to %d only in the bucket, from %d local; the bucket holds up to %d">`+
		`<rect x="0" y="3" width="%g" height="8" fill="#7a8fb8"/><rect x="%g" y="3" width="%g" height="8" fill="#3fa36b"/>`+
		`<line x1="%g" y1="0" x2="%g" y2="%g" stroke="#1b2233" stroke-width="1.5"/></svg>`,
		mn, mx, mn, localFrom, localFrom, bucketTo, lf, lf, w-lf, bt, bt, h))
}
