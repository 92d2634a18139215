package broker

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/stratamq/stratamq/broker/msgprop"
	"github.com/stratamq/stratamq/broker/progress"
	"github.com/stratamq/stratamq/broker/txn"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// Transactional messages live in broker/txn; this file builds its Service
// over the broker's store, gates, producers and durable progress. The
// handlers (rc037_end_transaction.go, grpc_backend.go's EndTransaction)
// and the send side (send_half.go) call it.
const (
	TransHalfTopic            = txn.HalfTopic
	TransOpHalfTopic          = txn.OpHalfTopic
	PropTransactionCheckTimes = txn.PropCheckTimes
	PropCheckImmunitySeconds  = txn.PropCheckImmunitySeconds
	PropProducerGroup         = msgprop.ProducerGroup

	sysFlagTransRollback = txn.SysFlagRollback
	sectionTransactions  = txn.Section
)

// newTrans makes the transaction service and loads its progress (New
// calls it once the store is open); held is the checkpoint's slave-held
// progress when this copy of the log holds its writes (loadedHeld).
func (b *Broker) newTrans(held []byte) (*txn.Service, error) {
	w := txnWire{b}
	t := txn.New(txn.Config{
		Dir:           filepath.Join(b.cfg.DataDir, "config"),
		CheckInterval: b.cfg.TransactionCheckInterval,
		Timeout:       b.cfg.TransactionTimeout,
		CheckMax:      b.cfg.TransactionCheckMax,
		DelayTopics:   []string{ScheduleTopic, TimerTopic},
		StoreHost:     b.storeHost,
		Logger:        b.log,
	}, txn.Deps{FS: b.fs, Store: b.store, Writer: w, Durability: w, Steps: &txnSteps{}, Producers: w, Topics: w})
	var cp []byte
	if b.dur != nil && b.dur.Loaded() != nil {
		cp = b.dur.Loaded().Sections[sectionTransactions]
	}
	return t, t.Load(cp, held, b.promotedReplica)
}

// txnWire is the broker as the transaction service sees it.
type txnWire struct{ b *Broker }

func (w txnWire) WriteTrans(ctx context.Context, msgs []store.Message) ([]store.PutResult, error) {
	return w.b.putTrans(ctx, msgs)
}

func (w txnWire) DurableEnds() (local, bucket int64) { return w.b.durableEnds() }

func (w txnWire) Conn(group string) *remoting.Conn { return w.b.consumers.ProducerConn(group) }

func (w txnWire) CheckGRPC(ctx context.Context, group string, props map[string]string, put store.PutResult) bool {
	return w.b.grpcCheck(ctx, group, props, put) // grpc_backend.go
}

func (w txnWire) Exists(topic string) bool {
	_, ok := w.b.topics.Get(topic)
	return ok
}

// txnSteps is the transaction progress's step log (broker/progress).
type txnSteps struct{ l progress.Log[txn.State] }

func (s *txnSteps) Reset(base txn.State)        { s.l = progress.NewLog(base) }
func (s *txnSteps) Add(st txn.State, end int64) { s.l.Add(st, end) }
func (s *txnSteps) At(d int64) txn.State        { return s.l.At(d) }
func (s *txnSteps) Latest() txn.State           { return s.l.Latest() }
func (s *txnSteps) Trim(d int64)                { s.l.Trim(d) }

// putTrans stores msgs (a commit or put-back copy and its op record, or an
// op record alone) in one store call, so they land together, through the
// write and ack gates, and returns one result per message.
func (b *Broker) putTrans(ctx context.Context, msgs []store.Message) ([]store.PutResult, error) {
	for _, m := range msgs {
		if err := b.writeGate(ctx, m.Topic, m.QueueID); err != nil {
			return nil, err
		}
	}
	res, err := b.store.Put(ctx, msgs)
	if err == nil {
		err = b.ackGate()
	}
	if err != nil && !errors.Is(err, store.ErrFlushTimeout) {
		return nil, err
	}
	if len(res) != len(msgs) {
		return nil, fmt.Errorf("broker: the store stored %d of %d transaction records", len(res), len(msgs))
	}
	return res, nil
}
