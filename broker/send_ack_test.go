package broker

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// TestBrokerSendsOfOneReadBatch: sends that arrive together on one
// connection are stored together (EndBatch) yet answered one by one: each
// gets its own queue offset, in arrival order, its record holds its own
// body, and a message the store refuses fails alone without failing the
// others around it. Run with both flush modes.
func TestBrokerSendsOfOneReadBatch(t *testing.T) {
	t.Parallel()
	for _, flush := range []string{"async", "sync"} {
		t.Run(flush, func(t *testing.T) {
			b, cl := startBroker(t, func(c *Config) { c.Flush = flush })
			addr := b.Addr().String()
			// Create the topic first (auto-create) so every queue exists.
			if r := invoke(t, cl, addr, sendReq("Batched", 0, []byte("first"), "")); r.Code != int32(remoting.Success) {
				t.Fatalf("first send: %d %s", r.Code, r.Remark)
			}
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			const n, bad = 30, 17
			var out []byte
			for i := 1; i <= n; i++ {
				props := ""
				if i == bad {
					props = "K" + "\x01" + strings.Repeat("v", store.MaxPropertiesLen) + "\x02"
				}
				req := sendReq("Batched", 0, []byte(fmt.Sprintf("body-%03d|", i)), props)
				req.Opaque = int32(i)
				if out, err = remoting.AppendFrame(out, req); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := nc.Write(out); err != nil {
				t.Fatal(err)
			}
			_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(nc)
			got := map[int32]*remoting.Command{}
			for len(got) < n {
				f, err := remoting.ReadFrame(br, nil, remoting.DefaultMaxFrameSize)
				if err != nil {
					t.Fatalf("after %d answers: %v", len(got), err)
				}
				r, err := remoting.DecodeFrame(f)
				if err != nil {
					t.Fatal(err)
				}
				got[r.Opaque] = r
			}
			last := int64(0) // "first" took queue offset 0
			for i := int32(1); i <= n; i++ {
				r := got[i]
				if i == bad {
					if r.Code != int32(remoting.MessageIllegal) || !strings.Contains(r.Remark, "properties") {
						t.Fatalf("oversize properties: code %d %q, want MESSAGE_ILLEGAL naming the properties", r.Code, r.Remark)
					}
					continue
				}
				if r.Code != int32(remoting.Success) {
					t.Fatalf("send %d: %d %s", i, r.Code, r.Remark)
				}
				qoff, _ := strconv.ParseInt(r.ExtFields["queueOffset"], 10, 64)
				if qoff != last+1 {
					t.Fatalf("send %d got queue offset %d, want %d (arrival order)", i, qoff, last+1)
				}
				last = qoff
				_, phys, err := store.DecodeMessageID(r.ExtFields["msgId"])
				if err != nil {
					t.Fatal(err)
				}
				rec, err := b.store.ReadRecord(phys)
				if err != nil {
					t.Fatal(err)
				}
				if want := fmt.Sprintf("body-%03d|", i); !strings.Contains(string(rec), want) {
					t.Fatalf("record of send %d does not hold %q", i, want)
				}
			}
			if max := b.store.MaxQueueOffset("Batched", 0); max != last+1 {
				t.Fatalf("queue 0 holds %d messages, want %d (the refused one stored nothing)", max, last+1)
			}
		})
	}
}
