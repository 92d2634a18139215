package namesrv

import (
	"strings"
	"testing"

	"github.com/stratamq/stratamq/remoting"
)

// TestNamesrvRefusesBadNames (issue 9 item 5): DELETE_TOPIC_IN_NAMESRV
// refuses invalid topics with SYSTEM_ERROR naming them and deletes nothing;
// REGISTER_BROKER routes a broker's valid topics and skips the invalid ones;
// PUT_KV_CONFIG refuses blank or over-long namespaces and keys.
func TestNamesrvRefusesBadNames(t *testing.T) {
	e := start(t, Config{})
	b := brokerA
	b.topics = map[string]remoting.TopicConfig{"TopicA": topic("TopicA", 4), "../../x": topic("../../x", 1), "a.b": topic("a.b", 1)}
	e.register(t, nil, b)
	if e.routeOf(t, "TopicA") == nil {
		t.Fatal("the valid topic has no route")
	}
	for _, bad := range []string{"../../x", "a.b"} {
		if e.routeOf(t, bad) != nil {
			t.Fatalf("invalid topic %q got a route", bad)
		}
	}
	for _, name := range []string{"../../../victim", "..", ".", "a/b", "a.b", "", strings.Repeat("t", 128)} {
		h := remoting.DeleteTopicRequestHeader{Topic: name}
		r := e.call(t, nil, remoting.NewRequest(remoting.DeleteTopicInNamesrv, h.Encode(), nil))
		if r.Code != int32(remoting.SystemError) {
			t.Errorf("delete %q: %d %q, want SYSTEM_ERROR", name, r.Code, r.Remark)
		}
		if name != "" && !strings.Contains(r.Remark, remoting.QuoteName(name)) {
			t.Errorf("delete %q: remark %q does not quote the name", name, r.Remark)
		}
	}
	if e.routeOf(t, "TopicA") == nil {
		t.Fatal("TopicA lost its route")
	}
	for _, kv := range [][2]string{{"", "k"}, {" ", "k"}, {"ns", ""}, {strings.Repeat("n", 256), "k"}, {"ns", strings.Repeat("k", 256)}} {
		h := remoting.KVConfigHeader{Namespace: kv[0], Key: kv[1], Value: "v"}
		r := e.call(t, nil, remoting.NewRequest(remoting.PutKVConfig, h.Encode(), nil))
		if r.Code != int32(remoting.SystemError) {
			t.Errorf("put kv %.10q/%.10q: %d %q, want SYSTEM_ERROR", kv[0], kv[1], r.Code, r.Remark)
		}
	}
	e.ns.mu.RLock()
	n := len(e.ns.mu.kv)
	e.ns.mu.RUnlock()
	if n != 0 {
		t.Fatalf("%d KV namespaces stored", n)
	}
	h := remoting.KVConfigHeader{Namespace: "PROJECT_CONFIG", Key: "10.0.0.1", Value: "p"}
	if r := e.call(t, nil, remoting.NewRequest(remoting.PutKVConfig, h.Encode(), nil)); r.Code != 0 {
		t.Fatalf("an address as a key: %d %s", r.Code, r.Remark)
	}
}
