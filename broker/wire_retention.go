package broker

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/stratamq/stratamq/broker/retention"
	"github.com/stratamq/stratamq/broker/tiering"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// Per-topic retention's policy (package retention): a topic's
// retention.time attribute overrides STRATAMQ_RETENTION for it; tiering's
// tick raises queue minima by each topic's retention through it
// (wire_tiering.go) and deletes a bucket segment once every queue with a
// record in it has its min past them. This file wires it: the names the
// broker exports for it, topicConfigs, and the adapters it reads the
// broker through (retWire, retHolds). It is constructed in New once the
// store is open; it has no goroutine of its own.

// RetentionAttribute is the topic attribute that overrides
// STRATAMQ_RETENTION for one topic.
const RetentionAttribute = retention.Attribute

// RetentionForever is a retention that never expires.
const RetentionForever = retention.Forever

// ParseRetention parses a retention.time value (retention.Parse).
func ParseRetention(v string) (time.Duration, error) { return retention.Parse(v) }

// TopicRetentionStatus is one topic in STRATAMQ_TOPIC_RETENTION's answer.
type TopicRetentionStatus = retention.TopicStatus

// TopicRetentionReport is STRATAMQ_TOPIC_RETENTION's body.
type TopicRetentionReport = retention.Report

// applyAttributes applies RocketMQ 5's attribute modifications
// (retention.ApplyAttributes).
func (b *Broker) applyAttributes(cur map[string]string, mods string) (map[string]string, error) {
	out, err := retention.ApplyAttributes(cur, mods)
	if err != nil {
		return nil, err
	}
	if err := b.checkCompaction(out); err != nil { // wire_compaction.go
		return nil, err
	}
	if v, ok := out[DurabilityAttribute]; ok {
		if err := checkDurability(v); err != nil {
			return nil, err
		}
		if v == DurabilityBucket && b.scoped == nil {
			return nil, fmt.Errorf("durability %s needs a bucket (STRATAMQ_BUCKET): this broker has none", v)
		}
		b.noteDurability(out)
	}
	return out, nil
}

// newRetention is the retention service over the open store and, with a
// bucket, what tiering says the bucket's objects hold.
func (b *Broker) newRetention() *retention.Service {
	w := retWire{b}
	d := retention.Deps{Store: b.store, Topics: w, Pins: w, Logger: b.log}
	if b.tier != nil {
		d.Holds = retHolds{b.tier}
	}
	return retention.New(retention.Config{Default: b.cfg.Retention}, d)
}

// topicConfigs is every topic, sorted by name.
func (b *Broker) topicConfigs() []remoting.TopicConfig {
	w := b.topics.Wrapper()
	out := make([]remoting.TopicConfig, 0, len(w.TopicConfigTable))
	for _, tc := range w.TopicConfigTable {
		out = append(out, tc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TopicName < out[j].TopicName })
	return out
}

// retWire is the broker as the retention service sees it
// (retention.Topics, Pins).
type retWire struct{ b *Broker }

var (
	_ retention.Store  = (*store.Store)(nil)
	_ retention.Topics = retWire{}
	_ retention.Pins   = retWire{}
	_ retention.Holds  = retHolds{}
)

func (w retWire) Configs() []remoting.TopicConfig { return w.b.topicConfigs() }

// Saved is the internal progress of the last checkpoint written
// (wire_durability.go savedProgress).
func (w retWire) Saved() []store.QueueMin {
	p := w.b.savedProgress()
	out := make([]store.QueueMin, 0, len(p))
	for k, v := range p {
		out = append(out, store.QueueMin{Topic: k.topic, QueueID: k.queue, Min: v})
	}
	return out
}

// retHolds is tiering's BucketHolds as retention's report reads it.
type retHolds struct{ t *tiering.Tiering }

func (x retHolds) BucketHolds(ctx context.Context) (retention.BucketHolds, error) {
	h, err := x.t.BucketHolds(ctx)
	out := retention.BucketHolds{Segments: h.Segments, Bytes: h.Bytes, Held: make(map[string]retention.Held, len(h.Held))}
	for topic, v := range h.Held {
		out.Held[topic] = retention.Held{Segments: v.Segments, Bytes: v.Bytes}
	}
	return out, err
}
