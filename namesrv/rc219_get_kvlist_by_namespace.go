package namesrv

import (
	"encoding/json"
	"maps"

	"github.com/stratamq/stratamq/remoting"
)

// getKVListByNamespace handles GET_KVLIST_BY_NAMESPACE (219).
func (ns *NameServer) getKVListByNamespace(req *remoting.Command) *remoting.Command {
	var h remoting.NamespaceHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return badRequest(req, err)
	}
	ns.mu.RLock()
	table := maps.Clone(ns.mu.kv[h.Namespace])
	ns.mu.RUnlock()
	if len(table) == 0 {
		return remoting.NewResponse(req, remoting.QueryNotFound, "No config item, Namespace: "+h.Namespace)
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body, _ = json.Marshal(remoting.KVTable{Table: table})
	return resp
}
