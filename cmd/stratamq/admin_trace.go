package main

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/stratamq/stratamq/msgtrace"
	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// traceBodyMax bounds a trace message's body once inflated (a client
// compresses bodies past 4 KiB; its trace bodies are at most ~118 KiB).
const traceBodyMax = 16 << 20

// adminQueryMsgTraceByID is `stratamq admin queryMsgTraceById`, mqadmin's
// command of that name: the trace messages whose KEYS hold the msgId
// (QUERY_MESSAGE on the trace topic, every master), decoded (package
// msgtrace) and printed as mqadmin prints them: the send, then each
// consumer group's consumptions, with client host, time, cost and status.
// As mqadmin's, -b and -e bound the trace messages' store times; the
// brokers are -n's masters or --broker's.
func adminQueryMsgTraceByID(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n", "c")
	id := fs.String("i", "", "the client's message id (msgId, UNIQ_KEY) (required)")
	fs.StringVar(id, "msgId", "", "same as -i")
	topic := fs.String("t", msgtrace.DefaultTopic, "the trace topic")
	fs.StringVar(topic, "traceTopic", msgtrace.DefaultTopic, "same as -t")
	begin := fs.Int64("b", 0, "trace messages stored from, unix ms")
	fs.Int64Var(begin, "beginTimestamp", 0, "same as -b")
	end := fs.Int64("e", math.MaxInt64, "trace messages stored up to, unix ms")
	fs.Int64Var(end, "endTimestamp", math.MaxInt64, "same as -e")
	maxNum := fs.Int("num", 64, "most trace messages per broker (the broker caps it at 64)")
	fs.IntVar(maxNum, "maxNum", 64, "same as -num")
	fs.StringVar(&e.brokers, "broker", "", "broker address(es), host:port[,host:port], instead of -n")
	asJSON := fs.Bool("json", false, "print the legs as JSON (every decoded field)")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *id == "" {
		return fmt.Errorf("%w: -i msgId is required", errAdminUsage)
	}
	h := remoting.QueryMessageRequestHeader{Topic: *topic, Key: *id, MaxNum: int32(*maxNum), BeginTimestamp: *begin, EndTimestamp: *end}
	var msgs []msgtrace.Message
	var bodyErrs []error
	_, err := e.queryEach(ctx, h, func(addr string, r store.Record) {
		body, err := traceBody(r)
		if err != nil {
			bodyErrs = append(bodyErrs, fmt.Errorf("%s: trace message at %d: %w", addr, r.PhysOffset, err))
			return
		}
		msgs = append(msgs, msgtrace.Message{Body: body, BornHost: r.BornHost.Addr().String()})
	})
	if err != nil {
		return err
	}
	legs, derr := msgtrace.Trace(*id, msgs)
	for _, err := range append(bodyErrs, derr) {
		if err != nil {
			fmt.Fprintf(e.stderr, "warning: %v\n", err)
		}
	}
	if len(legs) == 0 {
		return fmt.Errorf("no trace of message %s in topic %s (%d trace messages hold its id)", *id, *topic, len(msgs))
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(legs)
	}
	msgtrace.Print(e.stdout, legs)
	return nil
}

// traceBody is a trace message's body, inflated when its producer
// compressed it (sysFlag bit 0, zlib); a copy.
func traceBody(r store.Record) ([]byte, error) {
	if r.SysFlag&1 == 0 {
		return slices.Clone(r.Body), nil
	}
	zr, err := zlib.NewReader(bytes.NewReader(r.Body))
	if err != nil {
		return nil, fmt.Errorf("the body does not decompress (zlib): %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(zr, traceBodyMax+1))
	if err != nil {
		return nil, fmt.Errorf("the body does not decompress (zlib): %w", err)
	}
	if len(b) > traceBodyMax {
		return nil, fmt.Errorf("the body inflates past %d bytes", traceBodyMax)
	}
	return b, nil
}
