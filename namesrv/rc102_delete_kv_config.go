package namesrv

import "github.com/stratamq/stratamq/remoting"

// deleteKVConfig handles DELETE_KV_CONFIG (102); deleting a missing item
// succeeds.
func (ns *NameServer) deleteKVConfig(req *remoting.Command) *remoting.Command {
	var h remoting.KVConfigHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return badRequest(req, err)
	}
	ns.mu.Lock()
	if table := ns.mu.kv[h.Namespace]; table != nil {
		delete(table, h.Key)
		if len(table) == 0 {
			delete(ns.mu.kv, h.Namespace)
		}
	}
	ns.mu.Unlock()
	return remoting.NewResponse(req, remoting.Success, "")
}
