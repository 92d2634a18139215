package broker

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// getBrokerRuntimeInfo handles GET_BROKER_RUNTIME_INFO (28) (mqadmin
// brokerStatus): a KVTable of the broker's state, RocketMQ's keys where
// they have a meaning here.
func (b *Broker) getBrokerRuntimeInfo(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	st := b.HAStatus()
	i64 := func(n int64) string { return strconv.FormatInt(n, 10) }
	t := map[string]string{
		"brokerVersionDesc":        "StrataMQ (RocketMQ protocol version " + strconv.Itoa(Version) + ")",
		"bootTimestamp":            i64(b.upSince().UnixMilli()),
		"runtime":                  time.Since(b.upSince()).Round(time.Second).String(),
		"brokerRole":               st.Role,
		"epoch":                    i64(st.Epoch),
		"commitLogMinOffset":       i64(b.store.MinPhysOffset()),
		"commitLogMaxOffset":       i64(b.store.MaxPhysOffset()),
		"remainHowManyDataToFlush": i64(max(b.store.MaxPhysOffset()-b.store.FlushedPhysOffset(), 0)),
		"topics":                   strconv.Itoa(len(b.topicConfigs())),
		"consumerGroupsOnline":     strconv.Itoa(len(b.consumers.Groups())),
	}
	var local int64
	for _, s := range b.store.LocalSegments() {
		local += s.Length
	}
	t["commitLogLocalBytes"] = i64(local)
	if b.tier != nil && !b.tier.ReadOnly() {
		us := b.tier.Uploader().Stats()
		t["tierUploadLagBytes"] = i64(us.LagBytes)
		t["tierPendingSegments"] = i64(us.Pending)
	}
	body, err := json.Marshal(remoting.KVTable{Table: t})
	if err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = body
	return resp
}
