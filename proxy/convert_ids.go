package proxy

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/stratamq/stratamq/proxy/apiv2"
)

// A transaction id names a half message: its commitlog offset and its
// half queue offset, 16 upper-case hex digits each (32 in all). The
// clients treat it as opaque and hand it back in EndTransaction.
func encodeTransactionID(phys, halfOffset int64) string {
	return fmt.Sprintf("%016X%016X", uint64(phys), uint64(halfOffset))
}

func decodeTransactionID(s string) (phys, halfOffset int64, err error) {
	if len(s) != 32 {
		return 0, 0, bad(apiv2.Code_INVALID_TRANSACTION_ID, "the transaction id %q is not one this server handed out", cut(s))
	}
	p, err1 := strconv.ParseUint(s[:16], 16, 63)
	h, err2 := strconv.ParseUint(s[16:], 16, 63)
	if err1 != nil || err2 != nil {
		return 0, 0, bad(apiv2.Code_INVALID_TRANSACTION_ID, "the transaction id %q is not one this server handed out", cut(s))
	}
	return int64(p), int64(h), nil
}

// recallVersion starts every recall handle this server hands out.
const recallVersion = "s1"

// A recall handle names a scheduled record: base64url (no padding) of
// "s1 <real topic> <schedule topic> <queue> <queue offset> <commitlog offset> <UNIQ_KEY>".
func encodeRecallHandle(r Recall) string {
	s := strings.Join([]string{recallVersion, r.RealTopic, r.Topic, strconv.Itoa(int(r.QueueID)),
		strconv.FormatInt(r.QueueOffset, 10), strconv.FormatInt(r.PhysOffset, 10), r.MsgID}, " ")
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

func decodeRecallHandle(h string) (Recall, error) {
	invalid := bad(apiv2.Code_BAD_REQUEST, "the recall handle %q is not one this server handed out", cut(h))
	if len(h) > 1024 {
		return Recall{}, invalid
	}
	raw, err := base64.RawURLEncoding.DecodeString(h)
	if err != nil {
		return Recall{}, invalid
	}
	f := strings.Split(string(raw), " ")
	if len(f) != 7 || f[0] != recallVersion {
		return Recall{}, invalid
	}
	q, err1 := strconv.ParseInt(f[3], 10, 32)
	qo, err2 := strconv.ParseInt(f[4], 10, 64)
	po, err3 := strconv.ParseInt(f[5], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || q < 0 || qo < 0 || po < 0 || f[1] == "" || f[2] == "" || f[6] == "" {
		return Recall{}, invalid
	}
	return Recall{RealTopic: f[1], Topic: f[2], QueueID: int32(q), QueueOffset: qo, PhysOffset: po, MsgID: f[6]}, nil
}
