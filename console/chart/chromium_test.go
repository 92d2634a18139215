package chart

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// consoleCSP is the console's Content-Security-Policy (console.go).
const consoleCSP = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// TestChromium renders charts in headless Chromium under the console's
// CSP: nothing is refused (a control page shows that refusals would be
// seen), every series' path is drawn with a length, its data-label reads
// back as given, and the empty chart shows its text. Skipped with -short
// or without Chromium on PATH.
func TestChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	var chromium string
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			chromium = p
			break
		}
	}
	if chromium == "" {
		t.Skip("no Chromium on PATH")
	}
	nan := math.NaN()
	label := `<script>alert("x")</script> "q" 'r'`
	page := `<!doctype html><html><head><meta charset="utf-8"><title>charts</title></head><body>` +
		string(Line(Chart{Title: "Throughput in", Unit: "bytes/s", Series: []Series{
			series("orders", 1e6, 1.2e6, nan, 1.1e6, 1.3e6),
			series(label, 5e5, 6e5, 7e5, 6e5, 5e5),
			series("lone", nan, nan, 9e5, nan, nan),
		}})) +
		string(Line(Chart{Title: "Lag", Unit: "msg"})) + `</body></html>`
	control := `<!doctype html><html><body><div style="color:red">inline style</div></body></html>`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", consoleCSP)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if r.URL.Path == "/control" {
			w.Write([]byte(control))
			return
		}
		w.Write([]byte(page))
	}))
	defer srv.Close()

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium), chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// The first Do starts the browser, which lives as long as its
	// context: the wait for it has the deadline, not the context.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("start %s: %v", chromium, err)
		}
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatalf("%s did not start within 60s", chromium)
	}

	var mu sync.Mutex
	var messages []string
	err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *cdplog.EventEntryAdded:
			messages = append(messages, string(ev.Entry.Level)+": "+ev.Entry.Text)
		case *runtime.EventConsoleAPICalled:
			for _, a := range ev.Args {
				messages = append(messages, string(ev.Type)+": "+string(a.Value))
			}
		case *runtime.EventExceptionThrown:
			messages = append(messages, "exception: "+ev.ExceptionDetails.Text)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(messages, "\n")
	}
	tctx, cancelT := context.WithTimeout(ctx, 60*time.Second)
	defer cancelT()
	// The control: an inline style is refused, and the refusal is seen.
	if err := chromedp.Do(tctx, chromedp.Navigate(srv.URL+"/control")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(seen(), "Content Security Policy"); {
		if time.Now().After(deadline) {
			t.Fatalf("the control page's CSP refusal was not seen: %q", seen())
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	messages = nil
	mu.Unlock()

	var got []struct {
		Label  string  `json:"label"`
		Length float64 `json:"length"`
		Width  float64 `json:"width"`
		Points string  `json:"points"`
	}
	if err := chromedp.Do(tctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitReady(chromedp.CSS("svg.chart"))); err != nil {
		t.Fatal(err)
	}
	texts, err := chromedp.Run(tctx, chromedp.Evaluate[string](`JSON.stringify(Array.from(document.querySelectorAll("svg.chart path[data-points]")).map(p => ({
		label: p.dataset.label, length: p.getTotalLength(), width: p.getBBox().width, points: p.dataset.points})))`))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(texts), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[1].Label != label {
		t.Fatalf("paths %+v", got)
	}
	for _, p := range got {
		if p.Length <= 0 || p.Width <= 0 {
			t.Fatalf("path %q not drawn: %+v", p.Label, p)
		}
		if len(parsePoints(t, p.Points)) != 5 {
			t.Fatalf("path %q: data-points %q", p.Label, p.Points)
		}
	}
	body, err := chromedp.Run(tctx, chromedp.Text(chromedp.CSS("body")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(body, "no data yet") || !strings.Contains(body, label) {
		t.Fatalf("page text %q", body)
	}
	// Let any late report arrive.
	time.Sleep(200 * time.Millisecond)
	if m := seen(); m != "" {
		t.Fatalf("Chromium reported: %s", m)
	}
}
