package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/stratamq/stratamq/remoting"
	"github.com/stratamq/stratamq/store"
)

// Query limits, as RocketMQ's store config: a query returns at most
// maxMsgsNumBatch records, and a query by unique key (ext field
// _UNIQUE_KEY_QUERY=true) asks for defaultQueryMaxNum of them whatever
// maxNum says.
const (
	queryMaxNumBatch   = 64
	queryUniqKeyMaxNum = 32
	// queryMaxBytes bounds a response body (the first record always goes):
	// well under the 16 MiB frame limit of Java clients.
	queryMaxBytes = 8 << 20
)

// queryMessage handles QUERY_MESSAGE (12): the records of topic stored
// within [beginTimestamp, endTimestamp] whose KEYS hold key (or whose
// UNIQ_KEY is key), the newest maxNum of them, concatenated in commitlog
// order, found through the store's key index over local and tiered
// segments. Hash collisions are filtered here (RocketMQ leaves that to the
// client). Nothing found: QUERY_NOT_FOUND (22), as RocketMQ answers.
func (b *Broker) queryMessage(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.QueryMessageRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return errResponse(req, remoting.SystemError, fmt.Sprintf("QUERY_MESSAGE: %v", err))
	}
	if r := badTopic(req, h.Topic); r != nil {
		return r
	}
	if h.Key == "" {
		return errResponse(req, remoting.SystemError, "QUERY_MESSAGE: key is empty")
	}
	maxNum := int(min(h.MaxNum, queryMaxNumBatch))
	if h.UniqueKeyQuery {
		maxNum = queryUniqKeyMaxNum
	}
	res, err := b.store.QueryByKey(ctx, store.KeyQuery{Topic: h.Topic, Key: h.Key, UniqueKey: h.UniqueKeyQuery,
		MaxNum: maxNum, Begin: h.BeginTimestamp, End: h.EndTimestamp, MaxBytes: queryMaxBytes})
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return errResponse(req, remoting.SystemError, fmt.Sprintf("QUERY_MESSAGE %s#%s: %v", h.Topic, h.Key, err))
		}
		return errResponse(req, remoting.SystemError, fmt.Sprintf("QUERY_MESSAGE %s#%s: reading the key index or the records failed: %v", h.Topic, h.Key, err))
	}
	// A compacted topic's kept records, whose segments may be gone.
	if res.Records, err = b.queryKeyCompacted(ctx, h.Topic, h.Key, h.BeginTimestamp, h.EndTimestamp, maxNum, res.Records); err != nil {
		return errResponse(req, remoting.SystemError, fmt.Sprintf("QUERY_MESSAGE %s#%s: reading a compacted generation failed: %v", h.Topic, h.Key, err))
	}
	ext := (&remoting.QueryMessageResponseHeader{IndexLastUpdateTimestamp: res.LastIndexedTimestamp,
		IndexLastUpdatePhyoffset: res.LastIndexedPhysOffset}).Encode()
	if len(res.Records) == 0 {
		resp := errResponse(req, remoting.QueryNotFound, "can not find message, maybe time range not correct")
		resp.ExtFields = ext
		return resp
	}
	n := 0
	for _, r := range res.Records {
		n += len(r)
	}
	body := make([]byte, 0, n)
	for _, r := range res.Records {
		body = append(body, r...)
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.ExtFields = ext
	resp.Body = body
	return resp
}
