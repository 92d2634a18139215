package namesrv

import "github.com/stratamq/stratamq/remoting"

// putKVConfig handles PUT_KV_CONFIG (100).
func (ns *NameServer) putKVConfig(req *remoting.Command) *remoting.Command {
	var h remoting.KVConfigHeader
	if err := h.DecodePut(req.ExtFields); err != nil {
		return badRequest(req, err)
	}
	ns.mu.Lock()
	table := ns.mu.kv[h.Namespace]
	if table == nil {
		table = make(map[string]string)
		ns.mu.kv[h.Namespace] = table
	}
	table[h.Key] = h.Value
	ns.mu.Unlock()
	return remoting.NewResponse(req, remoting.Success, "")
}
