package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// TestE2EQueryByKey: messages sent by the official producer with keys are
// found by `stratamq admin queryMsgByKey` (QUERY_MESSAGE), by their
// offsetMsgId and by the client's msgId (`queryMsgById`), while the older
// ones exist only in the bucket (STRATAMQ_LOCAL_RETENTION=0, 1 MiB
// segments), and again after the broker restarts on an empty disk.
func TestE2EQueryByKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bucket := "file://" + filepath.Join(t.TempDir(), "bucket")
	env := map[string]string{"STRATAMQ_BUCKET": bucket, "STRATAMQ_SEGMENT_SIZE": "1MiB", "STRATAMQ_LOCAL_RETENTION": "0"}
	s := startServe(t, dir, env)
	topic := uniqueName(t, "Q")
	s.createTopic(topic, 4)
	p := newClientProducer(t, s.nsAddr)
	rng := rand.New(rand.NewPCG(3, 4))
	type sent struct{ msgID, offsetID string }
	var msgs []sent
	const n = 300 // ≈ 2.4 MiB: a few sealed segments
	for i := 0; i < n; i++ {
		body := make([]byte, 8<<10)
		for j := range body {
			body[j] = byte(rng.UintN(256))
		}
		m := primitive.NewMessage(topic, body)
		m.WithKeys([]string{fmt.Sprintf("order-%d", i), fmt.Sprintf("customer-%d", i%10)})
		res, err := p.SendSync(context.Background(), m)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		msgs = append(msgs, sent{res.MsgID, res.OffsetMsgID})
	}
	segDir := filepath.Join(dir, "store", "commitlog")
	waitFor(t, time.Minute, "the first segment uploaded and dropped locally", func() bool {
		_, err := os.Stat(filepath.Join(segDir, "00000000000000000000"))
		return os.IsNotExist(err)
	})

	check := func(when string) {
		t.Helper()
		ns := map[string]string{"NAMESRV_ADDR": s.nsAddr}
		// A key of the first message: in the bucket only.
		code, out, errOut := runAdminCmd(ns, "queryMsgByKey", "-t", topic, "-k", "order-0")
		if code != 0 || strings.Count(out, "msgId=") != 1 || !strings.Contains(out, "msgId="+msgs[0].msgID) {
			t.Fatalf("%s: queryMsgByKey order-0: exit %d\n%s%s", when, code, out, errOut)
		}
		// customer-3: 30 messages across every segment, cold and local.
		code, out, errOut = runAdminCmd(ns, "queryMsgByKey", "-t", topic, "-k", "customer-3")
		if code != 0 || strings.Count(out, "msgId=") != n/10 {
			t.Fatalf("%s: queryMsgByKey customer-3: exit %d, %d found\n%s%s", when, code, strings.Count(out, "msgId="), out, errOut)
		}
		for i := 3; i < n; i += 10 {
			if !strings.Contains(out, "msgId="+msgs[i].msgID+" ") {
				t.Fatalf("%s: customer-3 lacks message %d (%s):\n%s", when, i, msgs[i].msgID, out)
			}
		}
		// By offsetMsgId and by the client's msgId (UNIQ_KEY).
		code, out, errOut = runAdminCmd(ns, "queryMsgById", "-i", msgs[1].offsetID)
		if code != 0 || !strings.Contains(out, "offsetMsgId="+msgs[1].offsetID) || !strings.Contains(out, "msgId="+msgs[1].msgID) {
			t.Fatalf("%s: queryMsgById offsetMsgId: exit %d\n%s%s", when, code, out, errOut)
		}
		code, out, errOut = runAdminCmd(ns, "queryMsgById", "-t", topic, "-i", msgs[2].msgID)
		if code != 0 || strings.Count(out, "msgId=") != 1 || !strings.Contains(out, "msgId="+msgs[2].msgID) {
			t.Fatalf("%s: queryMsgById client msgId: exit %d\n%s%s", when, code, out, errOut)
		}
		code, _, errOut = runAdminCmd(ns, "queryMsgByKey", "-t", topic, "-k", "no-such-key")
		if code != 1 || !strings.Contains(errOut, "no-such-key") {
			t.Fatalf("%s: queryMsgByKey of a missing key: exit %d %s", when, code, errOut)
		}
		code, _, _ = runAdminCmd(ns, "queryMsgByKey", "-t", topic)
		if code != 2 {
			t.Fatalf("%s: queryMsgByKey without -k: exit %d, want 2", when, code)
		}
	}
	check("tiered")

	// A new machine: stop (drain to the bucket), start on an empty disk.
	s.stop()
	s2 := startServe(t, t.TempDir(), env)
	s = s2
	check("restored")
}
