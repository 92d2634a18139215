package namesrv

import (
	"encoding/json"
	"fmt"

	"github.com/stratamq/stratamq/remoting"
)

// queryDataVersion handles QUERY_DATA_VERSION (322): a broker asks whether
// its topic data version is the one registered here (if not it registers
// again). It also counts as a heartbeat for that broker, but only on the
// connection that registered it: the request is not signed (it needs no
// ACL account), and a peer's queries must not keep a dead broker's
// registration alive past its expiry.
func (ns *NameServer) queryDataVersion(c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.QueryDataVersionRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return badRequest(req, err)
	}
	var dv remoting.DataVersion
	if len(req.Body) > 0 {
		if err := json.Unmarshal(req.Body, &dv); err != nil {
			return remoting.NewResponse(req, remoting.SystemError, fmt.Sprintf("data version body: %v", err))
		}
	}
	now := ns.cfg.Clock()
	ns.mu.Lock()
	lb := ns.mu.live[brokerKey{h.ClusterName, h.BrokerAddr}]
	changed := lb == nil || !lb.dataVersion.Equal(dv)
	var recorded []byte
	var connID uint64
	if c != nil {
		connID = c.ID()
	}
	if lb != nil && (lb.connID == 0 || lb.connID == connID) {
		lb.lastUpdate = now
	}
	if lb != nil {
		recorded, _ = json.Marshal(lb.dataVersion)
	}
	ns.mu.Unlock()
	resp := remoting.NewResponse(req, remoting.Success, "")
	rh := remoting.QueryDataVersionResponseHeader{Changed: changed}
	resp.ExtFields = rh.Encode()
	resp.Body = recorded
	return resp
}
