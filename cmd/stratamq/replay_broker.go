package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// `stratamq replay -n NAMESRV --topic T`: the topic's history read from the
// running brokers the name servers route it to, with the bucket path's
// filters and outputs. Each queue is pulled (PULL_MESSAGE) from its start
// to the max offset it had when the replay began, queue after queue; the
// broker serves offsets below its local log from the bucket, so this reads
// the whole retained history as the bucket path does, plus the local tail
// not yet uploaded.
//
// No consumer-group side effects: the pulls carry no commit flag and no
// UPDATE_CONSUMER_OFFSET is ever sent. The group they name, replayGroup,
// is RocketMQ's tools group (mqadmin's own pulls use it); a broker that
// auto-creates subscription groups records its config once, never an
// offset.

// replayGroup is the consumer group the replay's pulls name.
const replayGroup = "TOOLS_CONSUMER"

// replayPullBatch is the most messages one PULL_MESSAGE asks for (the
// broker caps the response's bytes on its own).
const replayPullBatch = 64

// replayRange is one queue's part of a replay: offsets [from, to).
type replayRange struct {
	queueRef
	from, to int64
}

func replayFromBroker(ctx context.Context, o replayOpts, stdout, stderr io.Writer) (replaySummary, error) {
	start := time.Now()
	var sum replaySummary
	e := &adminEnv{namesrv: o.namesrv, timeout: 10 * time.Second, environ: o.environ, creds: o.creds, stdout: stdout, stderr: stderr}
	defer e.close()
	qs, err := e.topicQueues(ctx, o.topic)
	if err != nil {
		return sum, err
	}
	var picked []queueRef
	for _, q := range qs {
		if (o.queue < 0 || q.QueueID == int32(o.queue)) && (o.onlyBroker == "" || q.BrokerName == o.onlyBroker) {
			picked = append(picked, q)
		}
	}
	if len(picked) == 0 {
		return sum, fmt.Errorf("topic %s has no such queue (--queue %d, --broker-name %q): it has %d queues", o.topic, o.queue, o.onlyBroker, len(qs))
	}
	from, _ := parseReplayTime(o.from)
	to, _ := parseReplayTime(o.to)
	// Every range first: the end of each queue is its max offset now, so
	// messages sent while the replay runs (or republished into a topic it
	// reads) are not read.
	ranges := make([]replayRange, 0, len(picked))
	for _, q := range picked {
		r, err := o.queueRange(ctx, e, q, from, to)
		if err != nil {
			return sum, err
		}
		ranges = append(ranges, r)
	}
	if err := o.startRepublisher(ctx); err != nil {
		return sum, err
	}
	defer o.pub.close()
	w := bufio.NewWriterSize(stdout, 256<<10)
	defer w.Flush()
	progress := isTerminal(stderr)
	for i, r := range ranges {
		sum.queues++
		done, err := o.pullRange(ctx, e, w, r, from, to, &sum, stderr)
		if err != nil {
			return sum, fmt.Errorf("%s queue %d on %s (%s): %w", o.topic, r.QueueID, r.BrokerName, r.Addr, err)
		}
		if progress {
			fmt.Fprintf(stderr, "\rqueue %d/%d, %d messages", i+1, len(ranges), sum.messages)
		}
		if done {
			break
		}
	}
	if progress {
		fmt.Fprintln(stderr)
	}
	sum.took = time.Since(start)
	return sum, nil
}

// queueRange is the offsets of q to read: from the queue's min (or
// --from-offset, or the first message stored at or after --from) to its
// max now (or --to-offset, or the first message stored at or after --to).
func (o *replayOpts) queueRange(ctx context.Context, e *adminEnv, q queueRef, from, to int64) (replayRange, error) {
	r := replayRange{queueRef: q}
	mn, err := e.queueOffset(ctx, q, o.topic, remoting.GetMinOffset)
	if err != nil {
		return r, err
	}
	mx, err := e.queueOffset(ctx, q, o.topic, remoting.GetMaxOffset)
	if err != nil {
		return r, err
	}
	r.from, r.to = max(mn, o.fromOffset), mx
	if o.toOffset >= 0 {
		r.to = min(r.to, o.toOffset)
	}
	// Store times only grow along a queue (the broker's search assumes so
	// too), so a time range is an offset range; the filter checks each
	// message's time again.
	if from > 0 && r.from < r.to {
		off, err := e.searchOffset(ctx, q, o.topic, from)
		if err != nil {
			return r, err
		}
		r.from = max(r.from, off)
	}
	if to > 0 && r.from < r.to {
		off, err := e.searchOffset(ctx, q, o.topic, to)
		if err != nil {
			return r, err
		}
		r.to = min(r.to, off)
	}
	return r, nil
}

// searchOffset is the offset of the first message of q stored at or after
// ts (SEARCH_OFFSET_BY_TIMESTAMP, boundary "lower").
func (e *adminEnv) searchOffset(ctx context.Context, q queueRef, topic string, ts int64) (int64, error) {
	h := remoting.SearchOffsetRequestHeader{Topic: topic, QueueID: q.QueueID, Timestamp: ts, BoundaryType: "lower"}
	resp, err := e.invoke(ctx, q.Addr, remoting.NewRequest(remoting.SearchOffsetByTimestamp, h.Encode(), nil))
	if err != nil {
		return 0, err
	}
	var oh remoting.OffsetResponseHeader
	if err := oh.Decode(resp.ExtFields); err != nil {
		return 0, fmt.Errorf("SEARCH_OFFSET_BY_TIMESTAMP to %s: %w", q.Addr, err)
	}
	return oh.Offset, nil
}

// pullRange pulls r's offsets and delivers the messages that pass the
// filters; done once --limit is reached. Offsets retention removed while
// it ran are skipped with a note on stderr.
func (o *replayOpts) pullRange(ctx context.Context, e *adminEnv, w *bufio.Writer, r replayRange, from, to int64, sum *replaySummary, stderr io.Writer) (bool, error) {
	sub := "*"
	if o.tag != "" {
		sub = o.tag // the broker skips other tags by their hash; match checks the tag itself
	}
	h := remoting.PullMessageRequestHeader{ConsumerGroup: replayGroup, Topic: o.topic, QueueID: r.QueueID,
		SysFlag: remoting.PullFlagSubscription, Subscription: sub, ExpressionType: "TAG", BrokerName: r.BrokerName}
	for off := r.from; off < r.to; {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		h.QueueOffset, h.MaxMsgNums = off, int32(min(replayPullBatch, r.to-off))
		resp, err := e.invokeAny(ctx, r.Addr, remoting.NewRequest(remoting.PullMessage, h.Encode(), nil))
		if err != nil {
			return false, err
		}
		switch code := remoting.ResponseCode(resp.Code); code {
		case remoting.Success, remoting.PullRetryImmediately, remoting.PullOffsetMoved:
		case remoting.PullNotFound:
			return false, nil // the queue ends before the max read at start (its messages were removed)
		default:
			return false, fmt.Errorf("PULL_MESSAGE at offset %d: %s: %s", off, code, resp.Remark)
		}
		var rh remoting.PullMessageResponseHeader
		if err := rh.Decode(resp.ExtFields); err != nil {
			return false, fmt.Errorf("PULL_MESSAGE response header: %w", err)
		}
		switch remoting.ResponseCode(resp.Code) {
		case remoting.Success:
			sum.logBytes += int64(len(resp.Body))
			for b := resp.Body; len(b) > 0; {
				rec, n, err := store.DecodeRecord(b)
				if err != nil {
					return false, fmt.Errorf("a pulled record at offset %d does not decode: %w", off, err)
				}
				b = b[n:]
				if rec.QueueOffset >= r.to {
					return false, nil
				}
				if !o.match(rec, from, to) {
					continue
				}
				if done, err := o.deliver(ctx, w, rec, sum); done || err != nil {
					return done, err
				}
			}
		case remoting.PullOffsetMoved:
			if rh.NextBeginOffset > off {
				fmt.Fprintf(stderr, "stratamq replay: %s queue %d: offsets %d to %d are no longer retained; skipped\n",
					o.topic, r.QueueID, off, rh.NextBeginOffset)
			}
		} // PULL_RETRY_IMMEDIATELY: nothing matched the tag in what the broker scanned
		if rh.NextBeginOffset <= off {
			return false, fmt.Errorf("PULL_MESSAGE at offset %d: %s with next offset %d: no progress", off, remoting.ResponseCode(resp.Code), rh.NextBeginOffset)
		}
		off = rh.NextBeginOffset
	}
	return false, nil
}
