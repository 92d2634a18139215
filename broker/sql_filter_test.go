package broker

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// sqlPullReq is a pull that carries an SQL92 subscription (sysFlag bit 2).
func sqlPullReq(group, topic string, offset int64, exprType, expr string) *remoting.Command {
	h := remoting.PullMessageRequestHeader{ConsumerGroup: group, Topic: topic, QueueOffset: offset,
		MaxMsgNums: 32, SysFlag: pullFlagSubscription, Subscription: expr, ExpressionType: exprType}
	return remoting.NewRequest(remoting.PullMessage, h.Encode(), nil)
}

// pullNoSubReq is a pull that relies on the group's heartbeat subscription.
func pullNoSubReq(group, topic string, offset int64) *remoting.Command {
	h := remoting.PullMessageRequestHeader{ConsumerGroup: group, Topic: topic, QueueOffset: offset, MaxMsgNums: 32}
	return remoting.NewRequest(remoting.PullMessage, h.Encode(), nil)
}

func heartbeatReq(group, topic, exprType, expr string) *remoting.Command {
	body, _ := json.Marshal(remoting.HeartbeatData{ClientID: "c1", ConsumerDataSet: []remoting.ConsumerData{{
		GroupName: group, ConsumeType: "CONSUME_PASSIVELY", MessageModel: "CLUSTERING",
		SubscriptionDataSet: []remoting.SubscriptionData{{Topic: topic, SubString: expr, ExpressionType: exprType, SubVersion: 1}},
	}}})
	return remoting.NewRequest(remoting.HeartBeat, nil, body)
}

// recordProps returns the properties of each record of a pull body.
func recordProps(t *testing.T, body []byte) []map[string]string {
	t.Helper()
	var out []map[string]string
	for len(body) > 0 {
		size := int(binary.BigEndian.Uint32(body))
		rec := body[:size]
		bodyLen := int(binary.BigEndian.Uint32(rec[84:]))
		topicLen := int(rec[88+bodyLen])
		pl := 88 + bodyLen + 1 + topicLen
		out = append(out, parseProps(string(rec[pl+2:pl+2+int(binary.BigEndian.Uint16(rec[pl:]))])))
		body = body[size:]
	}
	return out
}

// sendSQLMessages sends n messages with a=i and b in x, y, z, w.
func sendSQLMessages(t *testing.T, b *Broker, cl *remoting.Client, topic string, n int) (want []string) {
	t.Helper()
	for i := range n {
		bv := []string{"x", "y", "z", "w"}[i%4]
		props := fmt.Sprintf("a\x01%d\x02b\x01%s\x02TAGS\x01T%d\x02", i, bv, i%3)
		if r := invoke(t, cl, b.Addr().String(), sendReq(topic, 0, []byte(strconv.Itoa(i)), props)); r.Code != 0 {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
		if i > 5 && (bv == "x" || bv == "y") {
			want = append(want, strconv.Itoa(i))
		}
	}
	return want
}

// pullAllSQL follows nextBeginOffset with req until the queue's end and
// returns property a of every message received.
func pullAllSQL(t *testing.T, b *Broker, cl *remoting.Client, req func(off int64) *remoting.Command) []string {
	t.Helper()
	var got []string
	off := int64(0)
	for range 1000 {
		resp := invoke(t, cl, b.Addr().String(), req(off))
		switch remoting.ResponseCode(resp.Code) {
		case remoting.Success:
			for _, p := range recordProps(t, resp.Body) {
				got = append(got, p["a"])
			}
		case remoting.PullRetryImmediately:
		case remoting.PullNotFound:
			return got
		default:
			t.Fatalf("pull at %d: code %d %s", off, resp.Code, resp.Remark)
		}
		next, _ := strconv.ParseInt(resp.ExtFields["nextBeginOffset"], 10, 64)
		if next <= off {
			t.Fatalf("pull at %d: nextBeginOffset %d", off, next)
		}
		off = next
	}
	t.Fatal("no end of queue after 1000 pulls")
	return nil
}

const briefExpr = "a > 5 AND b IN ('x','y')"

// TestBrokerSQLFilterPull: a pull that carries an SQL92 subscription gets
// exactly the matching messages, as does one that relies on the group's
// heartbeat, and one that carries the registered expression typed TAG
// (client-go's PostSubscriptionWhenPull).
func TestBrokerSQLFilterPull(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, nil)
	want := sendSQLMessages(t, b, cl, "S", 400)
	got := pullAllSQL(t, b, cl, func(off int64) *remoting.Command { return sqlPullReq("g", "S", off, exprSQL92, briefExpr) })
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("pull with an SQL92 subscription got %v\nwant %v", got, want)
	}
	if r := invoke(t, cl, b.Addr().String(), heartbeatReq("g2", "S", exprSQL92, briefExpr)); r.Code != 0 {
		t.Fatalf("heartbeat: %d %s", r.Code, r.Remark)
	}
	got = pullAllSQL(t, b, cl, func(off int64) *remoting.Command { return pullNoSubReq("g2", "S", off) })
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("pull by the heartbeat's SQL92 subscription got %v\nwant %v", got, want)
	}
	got = pullAllSQL(t, b, cl, func(off int64) *remoting.Command { return sqlPullReq("g2", "S", off, exprTag, briefExpr) })
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("pull with the registered expression typed TAG got %v\nwant %v", got, want)
	}
	// System properties select too.
	got = pullAllSQL(t, b, cl, func(off int64) *remoting.Command {
		return sqlPullReq("g", "S", off, exprSQL92, "TAGS = 'T1' AND a < 10")
	})
	if strings.Join(got, ",") != "1,4,7" {
		t.Fatalf("TAGS = 'T1' AND a < 10: got %v", got)
	}
}

// TestBrokerSQLFilterRefusals: a bad expression is answered with
// SUBSCRIPTION_PARSE_FAILED (23) and a remark naming the error and its
// column, on the heartbeat, on the group's pulls, on a pull that carries
// it and on CHECK_CLIENT_CONFIG; with STRATAMQ_SQL_FILTER=false every
// SQL92 subscription is refused with a remark saying how to enable it.
func TestBrokerSQLFilterRefusals(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, nil)
	addr := b.Addr().String()
	sendSQLMessages(t, b, cl, "S", 3)
	check := func(what string, r *remoting.Command, code remoting.ResponseCode, remark ...string) {
		t.Helper()
		if r.Code != int32(code) {
			t.Fatalf("%s: code %d (%s), want %d", what, r.Code, r.Remark, code)
		}
		for _, s := range remark {
			if !strings.Contains(r.Remark, s) {
				t.Fatalf("%s: remark %q does not say %q", what, r.Remark, s)
			}
		}
	}
	const bad = "a > 'x'"
	check("heartbeat", invoke(t, cl, addr, heartbeatReq("g", "S", exprSQL92, bad)), remoting.SubscriptionParseFailed, bad, "cannot be compared", "column 5")
	check("group pull", invoke(t, cl, addr, pullNoSubReq("g", "S", 0)), remoting.SubscriptionParseFailed, "cannot be compared", "column 5")
	check("pull", invoke(t, cl, addr, sqlPullReq("g", "S", 0, exprSQL92, "a >")), remoting.SubscriptionParseFailed, "column 4")
	check("unknown type", invoke(t, cl, addr, sqlPullReq("g", "S", 0, "CLASS", "x")), remoting.SubscriptionParseFailed, "CLASS")
	// The group's next heartbeat with a good expression replaces it.
	check("heartbeat fixed", invoke(t, cl, addr, heartbeatReq("g", "S", exprSQL92, "a = 1")), remoting.Success)
	r := invoke(t, cl, addr, pullNoSubReq("g", "S", 0))
	check("group pull fixed", r, remoting.Success)
	if p := recordProps(t, r.Body); len(p) != 1 || p[0]["a"] != "1" {
		t.Fatalf("a = 1 got %v", p)
	}
	ccc := func(addr, exprType, expr string) *remoting.Command {
		body, _ := json.Marshal(checkClientRequestBody{ClientID: "c1", Group: "g",
			SubscriptionData: &remoting.SubscriptionData{Topic: "S", SubString: expr, ExpressionType: exprType}})
		return invoke(t, cl, addr, remoting.NewRequest(remoting.CheckClientConfig, nil, body))
	}
	check("CHECK_CLIENT_CONFIG good", ccc(addr, exprSQL92, briefExpr), remoting.Success)
	check("CHECK_CLIENT_CONFIG tag", ccc(addr, exprTag, "*"), remoting.Success)
	check("CHECK_CLIENT_CONFIG bad", ccc(addr, exprSQL92, bad), remoting.SubscriptionParseFailed, "column 5")
	// The body as a Java 4.9 client's fastjson writes it.
	java := remoting.NewRequest(remoting.CheckClientConfig, nil, []byte(`{"clientId":"10.0.0.1@123","group":"g",`+
		`"subscriptionData":{"classFilterMode":false,"codeSet":[],"expressionType":"SQL92","subString":"a > 5",`+
		`"subVersion":1700000000000,"tagsSet":[],"topic":"S"}}`))
	java.Language = "JAVA"
	check("CHECK_CLIENT_CONFIG from Java", invoke(t, cl, addr, java), remoting.Success)

	off, ocl := startBroker(t, func(c *Config) { c.SQLFilter = "false" })
	oaddr := off.Addr().String()
	sendSQLMessages(t, off, ocl, "S", 3)
	check("off: heartbeat", invoke(t, ocl, oaddr, heartbeatReq("g", "S", exprSQL92, briefExpr)), remoting.SubscriptionParseFailed, "STRATAMQ_SQL_FILTER=true")
	check("off: group pull", invoke(t, ocl, oaddr, pullNoSubReq("g", "S", 0)), remoting.SubscriptionParseFailed, "STRATAMQ_SQL_FILTER=true")
	check("off: pull", invoke(t, ocl, oaddr, sqlPullReq("g", "S", 0, exprSQL92, briefExpr)), remoting.SubscriptionParseFailed, "STRATAMQ_SQL_FILTER=true")
	check("off: CHECK_CLIENT_CONFIG", ccc(oaddr, exprSQL92, briefExpr), remoting.SystemError, "STRATAMQ_SQL_FILTER=true")
	check("off: tags still work", invoke(t, ocl, oaddr, pullReq("g3", "S", 0, 0, 0, "*")), remoting.Success)
}

func TestBrokerSQLFilterConfig(t *testing.T) {
	t.Parallel()
	for v, ok := range map[string]bool{"": true, "true": true, "false": true, "0": true, "yes": false} {
		c := Config{SQLFilter: v}.withDefaults()
		if err := c.Validate(); (err == nil) != ok {
			t.Errorf("STRATAMQ_SQL_FILTER=%q: Validate %v", v, err)
		}
	}
}

// TestBrokerSQLFilterHeldPull: an SQL92 pull held at the end of its queue
// is answered with the first matching message, before its hold ends;
// messages it does not take do not answer it (the dispatch hook wakes it
// for each, and it waits on past them).
func TestBrokerSQLFilterHeldPull(t *testing.T) {
	t.Parallel()
	b, cl := startBroker(t, nil)
	addr := b.Addr().String()
	if r := invoke(t, cl, addr, sendReq("H", 0, []byte("m0"), "a\x010\x02")); r.Code != 0 {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	type result struct {
		resp *remoting.Command
		err  error
	}
	got := make(chan result, 1)
	go func() {
		h := remoting.PullMessageRequestHeader{ConsumerGroup: "g", Topic: "H", QueueOffset: 1, MaxMsgNums: 32,
			SysFlag: pullFlagSuspend | pullFlagSubscription, SuspendTimeoutMillis: 20000, Subscription: "a = 7", ExpressionType: exprSQL92}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := cl.Invoke(ctx, addr, remoting.NewRequest(remoting.PullMessage, h.Encode(), nil))
		got <- result{r, err}
	}()
	waitCond(t, 10*time.Second, "pull parked", func() bool { return b.hold.count() == 1 })
	for i := 1; i <= 3; i++ {
		if r := invoke(t, cl, addr, sendReq("H", 0, []byte("no"), fmt.Sprintf("a\x01%d\x02", i))); r.Code != 0 {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
		waitCond(t, 10*time.Second, "pull parked again past the message it does not take", func() bool {
			return b.hold.count() == 1 && b.hold.heldOffset() == int64(i+1)
		})
	}
	select {
	case r := <-got:
		t.Fatalf("held SQL92 pull answered by messages it does not take: %d %s", r.resp.Code, r.resp.Remark)
	default:
	}
	if r := invoke(t, cl, addr, sendReq("H", 0, []byte("yes"), "a\x017\x02")); r.Code != 0 {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.resp.Code != int32(remoting.Success) {
			t.Fatalf("held pull answered %d %s", r.resp.Code, r.resp.Remark)
		}
		if p := recordProps(t, r.resp.Body); len(p) != 1 || p[0]["a"] != "7" || r.resp.ExtFields["nextBeginOffset"] != "5" {
			t.Fatalf("held pull got %v, nextBeginOffset %s; want a=7 and 5", p, r.resp.ExtFields["nextBeginOffset"])
		}
	case <-time.After(15 * time.Second):
		t.Fatal("held SQL92 pull not woken by the matching message")
	}
}

// heldOffset is the queue offset the only held pull waits past (-1: none,
// or more than one).
func (p *pullHold) heldOffset() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	off, n := int64(-1), 0
	for _, l := range p.mu.waiting {
		for _, h := range l {
			off = h.offset
			n++
		}
	}
	if n != 1 {
		return -1
	}
	return off
}
