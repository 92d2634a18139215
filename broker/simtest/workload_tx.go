package simtest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// Transaction states as END_TRANSACTION carries them.
const (
	txUnknown  int32 = 0
	txCommit   int32 = 8
	txRollback int32 = 12
)

// txWorkload is rocketmq-client-go's TransactionProducer against topic
// SimX: each transaction's half is sent (sysFlag TRANSACTION_PREPARED,
// TRAN_MSG, PGROUP), then its local transaction ends it commit, rollback
// or unknown with END_TRANSACTION (oneway, to the broker that stored the
// half); the producer heartbeats its group to every node (every second),
// so the master's check service can ask it about halves in doubt
// (CHECK_TRANSACTION_STATE), which its check handler answers with the
// transaction's state: an unknown one answers unknown 0-2 times, then its
// final state. Every state is drawn from the seed per transaction, so a
// replay answers the same.
type txWorkload struct {
	seed   uint64
	topic  string
	group  string
	queues int
	pace   time.Duration

	hb     sync.WaitGroup // the heartbeat loop
	stopFn func()         // ends the producer (heartbeats, client)

	mu        sync.Mutex
	txs       map[string]*tx // by UNIQ_KEY (the transaction id), every try
	acked     []*tx          // halves acknowledged SEND_OK
	sends     int
	asyncLost int
	checks    int
	seenBody  map[string]bool
}

type tx struct {
	body     string
	uniq     string
	first    int32 // the END the local transaction sends
	final    int32 // commit or rollback: what the check handler answers in the end
	unknowns int   // check answers of unknown before the final one
	node     int   // the node that acknowledged the half
	at       time.Time
	checks   int       // checks received
	resolved bool      // a check was answered with the final state
	lastChk  time.Time // the last check received
	phys     int64     // where the half starts in the commitlog (-1: unknown)
}

func newTxWorkload(seed uint64) *txWorkload {
	return &txWorkload{seed: seed, topic: "SimX", group: "simtxpg", queues: 2, pace: 100 * time.Millisecond,
		txs: map[string]*tx{}, seenBody: map[string]bool{}}
}

func (x *txWorkload) Name() string { return "tx" }

// Run sends transactions until ctx ends. The producer itself (its
// heartbeats and its check handler) lives on until stop: the check
// service asks it about halves in doubt after the heal too.
func (x *txWorkload) Run(ctx context.Context, w *world) {
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second, Dial: w.client.Dial, Logger: w.c.logger,
		Handler: remoting.HandlerFunc(x.check)})
	hctx, cancel := context.WithCancel(context.Background())
	x.stopFn = func() {
		cancel()
		x.hb.Wait()
		cl.Close()
	}
	x.hb.Go(func() { x.heartbeat(hctx, w, cl) })
	s := &sender{w: w, cl: cl}
	for seq := 0; ; seq++ {
		queue := seq % x.queues
		first, final, unknowns := x.draw(seq)
		node, resp, try, ok := s.send(ctx, func(try int) *remoting.Command {
			body := fmt.Sprintf("x%06d-t%d", seq, try)
			t := &tx{body: body, uniq: "SIMX" + body, first: first, final: final, unknowns: unknowns}
			x.mu.Lock()
			x.txs[t.uniq] = t
			x.sends++
			x.mu.Unlock()
			p := props("UNIQ_KEY", t.uniq, "TRAN_MSG", "true", "PGROUP", x.group)
			return sendMsgReq(x.group, x.topic, queue, 0x4, p, []byte(body))
		}, nil)
		if ok {
			x.mu.Lock()
			t := x.txs[fmt.Sprintf("SIMXx%06d-t%d", seq, try)]
			t.node, t.at, t.phys = node, time.Now(), physOf(resp.ExtFields["msgId"])
			x.acked = append(x.acked, t)
			x.mu.Unlock()
			// The local transaction ran; its state goes to the broker that
			// stored the half, oneway (lost if that broker is gone: the
			// check answers for it).
			if _, phys, err := store.DecodeMessageID(resp.ExtFields["msgId"]); err == nil {
				var qoff int64
				fmt.Sscan(resp.ExtFields["queueOffset"], &qoff)
				h := remoting.EndTransactionRequestHeader{ProducerGroup: x.group, TranStateTableOffset: qoff, CommitLogOffset: phys,
					CommitOrRollback: first, MsgID: t.uniq, TransactionID: t.uniq}
				ictx, cancel := context.WithTimeout(ctx, time.Second)
				_ = cl.InvokeOneway(ictx, w.nodeAddrs()[node], remoting.NewRequest(remoting.EndTransaction, h.Encode(), nil))
				cancel()
			}
		}
		if !sleep(ctx, x.pace) {
			return
		}
	}
}

// stop ends the producer (sim.go calls it once the checks are done).
func (x *txWorkload) stop() {
	if x.stopFn != nil {
		x.stopFn()
	}
}

// draw is transaction seq's states: 4 in 10 commit, 3 rollback, 3
// unknown (resolved by the check to commit or rollback, after 0-2 more
// unknowns).
func (x *txWorkload) draw(seq int) (first, final int32, unknowns int) {
	switch k := pick(x.seed, 10, "tx", seq); {
	case k < 4:
		return txCommit, txCommit, 0
	case k < 7:
		return txRollback, txRollback, 0
	}
	final = txCommit
	if pick(x.seed, 2, "txfinal", seq) == 1 {
		final = txRollback
	}
	return txUnknown, final, pick(x.seed, 3, "txunknowns", seq)
}

// heartbeat registers the producer group with every node every second
// (client-go sends its heartbeat to the brokers of its routes; a node that
// becomes master learns the producer from the next one).
func (x *txWorkload) heartbeat(ctx context.Context, w *world, cl *remoting.Client) {
	body, _ := json.Marshal(remoting.HeartbeatData{ClientID: "10.0.9.1@simtx", ProducerDataSet: []remoting.ProducerData{{GroupName: x.group}}})
	for {
		for _, addr := range w.nodeAddrs() {
			ictx, cancel := context.WithTimeout(ctx, time.Second)
			_, _ = cl.Invoke(ictx, addr, remoting.NewRequest(remoting.HeartBeat, nil, body))
			cancel()
		}
		if !sleep(ctx, time.Second) {
			return
		}
	}
}

// check is the producer's check handler (TransactionListener
// .CheckLocalTransaction): it answers with END_TRANSACTION on the conn the
// check came on, fromTransactionCheck set.
func (x *txWorkload) check(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	if remoting.RequestCode(req.Code) != remoting.CheckTransactionState {
		return remoting.NotSupported(req)
	}
	var h remoting.CheckTransactionStateRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return nil
	}
	id := h.TransactionID
	if id == "" {
		id = h.MsgID
	}
	x.mu.Lock()
	t := x.txs[id]
	state := txUnknown
	if t != nil {
		x.checks++
		t.checks++
		t.lastChk = time.Now()
		if t.checks > t.unknowns {
			state = t.final
			t.resolved = true
		}
	}
	x.mu.Unlock()
	if t == nil {
		return nil // not ours: the official client answers unknown; nothing to send
	}
	e := remoting.EndTransactionRequestHeader{ProducerGroup: x.group, TranStateTableOffset: h.TranStateTableOffset,
		CommitLogOffset: h.CommitLogOffset, CommitOrRollback: state, FromTransactionCheck: true, MsgID: id, TransactionID: id}
	ictx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_ = c.InvokeOneway(ictx, remoting.NewRequest(remoting.EndTransaction, e.Encode(), nil))
	return nil
}

// excused reports whether t's half may be lost with the async_master
// allowance (then nothing is expected of it).
func (x *txWorkload) excused(f *finalState, t *tx) bool { return f.lostAsyncAt(t.body, t.node, t.at) }

// txTimeout is STRATAMQ_TRANSACTION_TIMEOUT's default, which the
// cluster runs with: a half is checked once it is this old.
const txTimeout = 6 * time.Second

// Settle consumes SimX until every acknowledged transaction that ends
// committed was delivered and every one in doubt was resolved by a check,
// or for STRATAMQ_TRANSACTION_TIMEOUT and five check intervals: every
// half is old enough by then, and a check service that asks about every
// half in doubt each round has asked each one up to five times (the
// handler answers unknown at most twice).
func (x *txWorkload) Settle(w *world, f *finalState) {
	cl := w.newClient()
	defer cl.Close()
	p := newPuller("simxcg", tq{x.topic, 0}, tq{x.topic, 1})
	settleWait(time.Now().Add(txTimeout+5*w.c.opt.TxCheckInterval), 200*time.Millisecond, func() bool {
		p.pass(context.Background(), w, cl, func(_ int, r rec) {
			x.mu.Lock()
			x.seenBody[r.body] = true
			x.mu.Unlock()
		})
		x.mu.Lock()
		defer x.mu.Unlock()
		for _, t := range x.acked {
			if x.excused(f, t) {
				continue
			}
			if t.first == txUnknown && !t.resolved {
				return false
			}
			if t.final == txCommit && !x.seenBody[t.body] {
				return false
			}
		}
		return true
	})
}

// Check: every acknowledged transaction that ended committed (by its
// producer, or by the check answering for it) is in SimX exactly once
// (the README: a half is committed at most once), no rolled-back one is,
// and every one in doubt was resolved by a check-back; an async_master's
// lost half is counted.
func (x *txWorkload) Check(f *finalState) []Violation {
	var out violations
	rs, err := readTopic(f.m, x.topic, x.queues)
	if err != nil {
		out.add("unreadable", "%s on the healed master: %v", x.topic, err)
	}
	got := byBody(rs)
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, t := range x.acked {
		n := len(got[t.body])
		desc := fmt.Sprintf("transaction %q (half acknowledged by n%d at %s, ended %s, final %s, %d checks)", t.body, t.node, ms(t.at),
			txName(t.first), txName(t.final), t.checks)
		if x.excused(f, t) {
			if t.final == txCommit && n == 0 {
				x.asyncLost++
			}
			continue
		}
		switch {
		case t.first == txUnknown && !t.resolved:
			out.add("tx-unresolved", "%s: never resolved by a check-back", desc)
		case t.final == txCommit && n == 0 && t.checks == 0:
			// Its END_TRANSACTION may have been lost with the node it went
			// to; then only a check resolves it, and none came.
			out.add("tx-commit-unchecked", "%s: not in %s, and never checked", desc, x.topic)
		case t.final == txCommit && n == 0:
			out.add("tx-commit-lost", "%s: not in %s", desc, x.topic)
		case t.final == txCommit && n > 1:
			out.add("tx-duplicate", "%s: in %s %d times", desc, x.topic, n)
		case t.final == txRollback && n > 0:
			out.add("tx-rollback-delivered", "%s: in %s %d times", desc, x.topic, n)
		}
	}
	return out
}

func txName(s int32) string {
	switch s {
	case txCommit:
		return "commit"
	case txRollback:
		return "rollback"
	}
	return "unknown"
}

func (x *txWorkload) Summary() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	var kinds []string
	n := map[string]int{}
	for _, t := range x.acked {
		n[txName(t.first)+"->"+txName(t.final)]++
	}
	for _, k := range []string{"commit->commit", "rollback->rollback", "unknown->commit", "unknown->rollback"} {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n[k]))
	}
	return fmt.Sprintf("tx: %d halves acknowledged of %d sends (%s), %d checks answered, %d async losses", len(x.acked), x.sends,
		strings.Join(kinds, ", "), x.checks, x.asyncLost)
}

func (x *txWorkload) physs(into map[string]int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, t := range x.acked {
		if t.phys >= 0 {
			into[t.body] = t.phys
		}
	}
}

func (x *txWorkload) topics() []tq { return []tq{{x.topic, 0}, {x.topic, 1}} }
