package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// masters is the brokers a query goes to: -b's list, else the master
// (brokerId 0) of every brokerName the name server knows (of cluster -c).
func (e *adminEnv) masters(ctx context.Context) ([]string, error) {
	e.mastersOnly = true
	return e.targets(ctx)
}

// eachMaster sends the request mk makes to every master and prints
// done(addr) after each success; it stops at the first failure.
func (e *adminEnv) eachMaster(ctx context.Context, mk func() *remoting.Command, done func(addr string) string) error {
	addrs, err := e.masters(ctx)
	if err != nil {
		return err
	}
	for _, addr := range addrs {
		if _, err := e.invoke(ctx, addr, mk()); err != nil {
			return err
		}
		fmt.Fprintln(e.stdout, done(addr))
	}
	return nil
}

// adminQueryMsgByKey is `stratamq admin queryMsgByKey`, mqadmin's
// command of that name: QUERY_MESSAGE (12) to every master, the records
// printed one a line.
func adminQueryMsgByKey(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n", "b", "c")
	topic := fs.String("t", "", "topic (required)")
	key := fs.String("k", "", "message key, one of its KEYS (required)")
	maxNum := fs.Int("max", 64, "most messages per broker (the broker caps it at 64)")
	fs.IntVar(maxNum, "m", 64, "same as --max")
	begin := fs.Int64("f", 0, "store time from, unix ms (inclusive)")
	end := fs.Int64("e", math.MaxInt64, "store time to, unix ms (inclusive)")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *topic == "" || *key == "" {
		return fmt.Errorf("%w: -t topic and -k key are required", errAdminUsage)
	}
	h := remoting.QueryMessageRequestHeader{Topic: *topic, Key: *key, MaxNum: int32(*maxNum), BeginTimestamp: *begin, EndTimestamp: *end}
	n, err := e.query(ctx, h)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("no message of topic %q has key %q in [%d, %d]", *topic, *key, *begin, *end)
	}
	return nil
}

// adminQueryMsgByID is `stratamq admin queryMsgById -i id`: as mqadmin,
// an id that decodes as an offsetMsgId is asked for with
// VIEW_MESSAGE_BY_ID (33); otherwise (or when no broker has it), with -t,
// it is the client's msgId (UNIQ_KEY), asked for with QUERY_MESSAGE and
// _UNIQUE_KEY_QUERY=true.
func adminQueryMsgByID(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n", "b", "c")
	id := fs.String("i", "", "message id: an offsetMsgId, or the client's msgId with -t (required)")
	topic := fs.String("t", "", "topic, to look the id up as the client's msgId (UNIQ_KEY)")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *id == "" {
		return fmt.Errorf("%w: -i msgId is required", errAdminUsage)
	}
	addrs, err := e.masters(ctx)
	if err != nil {
		return err
	}
	var errs []error
	if _, off, derr := store.DecodeMessageID(*id); derr == nil {
		for _, addr := range addrs {
			h := remoting.ViewMessageRequestHeader{Offset: off, Topic: *topic}
			resp, err := e.invoke(ctx, addr, remoting.NewRequest(remoting.ViewMessageByID, h.Encode(), nil))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			rec, _, err := store.DecodeRecord(resp.Body)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: the record does not decode: %w", addr, err))
				continue
			}
			if *topic == "" || rec.Topic == *topic {
				printRecord(e.stdout, addr, rec)
				return nil
			}
		}
	} else if *topic == "" {
		return fmt.Errorf("%w: %q is not an offsetMsgId (%v); give -t topic to look it up as the client's msgId", errAdminUsage, *id, derr)
	}
	if *topic != "" {
		h := remoting.QueryMessageRequestHeader{Topic: *topic, Key: *id, MaxNum: 32, EndTimestamp: math.MaxInt64, UniqueKeyQuery: true}
		n, err := e.query(ctx, h)
		if err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("message %s not found: %w", *id, errors.Join(errs...))
	}
	return fmt.Errorf("message %s not found in topic %q", *id, *topic)
}

// query sends QUERY_MESSAGE with h to every master and prints what they
// found; QUERY_NOT_FOUND is no error.
func (e *adminEnv) query(ctx context.Context, h remoting.QueryMessageRequestHeader) (int, error) {
	return e.queryEach(ctx, h, func(addr string, rec store.Record) { printRecord(e.stdout, addr, rec) })
}

// queryEach sends QUERY_MESSAGE with h to every master and calls fn with
// each record found (rec's bytes alias the answer); QUERY_NOT_FOUND is no
// error.
func (e *adminEnv) queryEach(ctx context.Context, h remoting.QueryMessageRequestHeader, fn func(addr string, rec store.Record)) (int, error) {
	addrs, err := e.masters(ctx)
	if err != nil {
		return 0, err
	}
	if e.cl == nil {
		cl, err := e.newClient()
		if err != nil {
			return 0, err
		}
		e.cl = cl
	}
	found := 0
	var errs []error
	for _, addr := range addrs {
		cctx, cancel := context.WithTimeout(ctx, e.timeout)
		req := remoting.NewRequest(remoting.QueryMessage, h.Encode(), nil)
		e.creds.Sign(req)
		resp, err := e.cl.Invoke(cctx, addr, req)
		cancel()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("QUERY_MESSAGE to %s: %w", addr, err))
			continue
		case resp.Code == int32(remoting.QueryNotFound):
			continue
		case resp.Code != int32(remoting.Success):
			errs = append(errs, fmt.Errorf("QUERY_MESSAGE to %s: %s: %s", addr, remoting.ResponseCode(resp.Code), resp.Remark))
			continue
		}
		for b := resp.Body; len(b) > 0; {
			rec, n, err := store.DecodeRecord(b)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: a record of the answer does not decode: %w", addr, err))
				break
			}
			fn(addr, rec)
			found++
			b = b[n:]
		}
	}
	if len(errs) > 0 {
		return found, fmt.Errorf("%d of %d brokers failed: %w", len(errs), len(addrs), errors.Join(errs...))
	}
	return found, nil
}

// printRecord prints one message: its ids, queue, store time and keys.
func printRecord(w io.Writer, addr string, r store.Record) {
	props := map[string]string{}
	for _, kv := range strings.Split(r.Properties, "\x02") {
		if k, v, ok := strings.Cut(kv, "\x01"); ok {
			props[k] = v
		}
	}
	fmt.Fprintf(w, "msgId=%s offsetMsgId=%s topic=%s queueId=%d queueOffset=%d storeTime=%s keys=%q tags=%q bodyBytes=%d broker=%s\n",
		props["UNIQ_KEY"], store.EncodeMessageID(r.StoreHost, r.PhysOffset), r.Topic, r.QueueID, r.QueueOffset,
		time.UnixMilli(r.StoreTimestamp).UTC().Format("2006-01-02T15:04:05.000Z"), props["KEYS"], props["TAGS"],
		len(r.Body), addr)
}
