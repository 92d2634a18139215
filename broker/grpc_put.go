package broker

import (
	"context"
	"slices"
	"sync"

	"github.com/stratamq/stratamq/store"
)

// grpcPutter stores the gRPC endpoint's concurrent sends together, as a
// connection's read batch does for remoting sends: one caller at a time
// (the leader) stores everything queued so far with one store.Put and
// hands each caller its results; callers arriving meanwhile queue for
// the next round, which the first of them leads. No timer: a lone send is
// stored at once; under load a round holds what arrived during the last.
type grpcPutter struct {
	mu      sync.Mutex
	busy    bool
	pending []*grpcPut
}

type grpcPut struct {
	msgs []store.Message
	res  []store.PutResult
	err  error
	done chan struct{} // closed when res/err are set
	lead chan struct{} // closed when this caller leads the next round
}

// maxPutRound bounds the messages of one round.
const maxPutRound = 1024

// grpcPut stores msgs (each already accepted by store.Validate) and
// returns their results, in order.
func (b *Broker) grpcPut(msgs []store.Message) ([]store.PutResult, error) {
	g := &b.grpcPuts
	p := &grpcPut{msgs: msgs, done: make(chan struct{}), lead: make(chan struct{})}
	g.mu.Lock()
	g.pending = append(g.pending, p)
	if g.busy {
		g.mu.Unlock()
		select {
		case <-p.done:
			return p.res, p.err
		case <-p.lead:
		}
		g.mu.Lock()
	}
	g.busy = true
	n, k := 0, 0
	for k < len(g.pending) && (k == 0 || n+len(g.pending[k].msgs) <= maxPutRound) {
		n += len(g.pending[k].msgs)
		k++
	}
	round := slices.Clone(g.pending[:k])
	g.pending = slices.Delete(g.pending, 0, k)
	g.mu.Unlock()

	all := make([]store.Message, 0, n)
	for _, q := range round {
		all = append(all, q.msgs...)
	}
	// Not canceled with one caller's context: the round is everyone's.
	res, err := b.store.Put(context.Background(), all)
	i := 0
	for _, q := range round {
		if err == nil {
			q.res = res[i : i+len(q.msgs)]
		}
		q.err = err
		i += len(q.msgs)
		if q != p {
			close(q.done)
		}
	}

	g.mu.Lock()
	if len(g.pending) > 0 {
		close(g.pending[0].lead) // the next round's leader
	} else {
		g.busy = false
	}
	g.mu.Unlock()
	return p.res, p.err
}
