package namesrv

import "github.com/stratamq/stratamq/remoting"

// getKVConfig handles GET_KV_CONFIG (101); a missing item is QUERY_NOT_FOUND.
func (ns *NameServer) getKVConfig(req *remoting.Command) *remoting.Command {
	var h remoting.KVConfigHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return badRequest(req, err)
	}
	ns.mu.RLock()
	v, ok := ns.mu.kv[h.Namespace][h.Key]
	ns.mu.RUnlock()
	if !ok {
		return remoting.NewResponse(req, remoting.QueryNotFound,
			"No config item, Namespace: "+h.Namespace+" Key: "+h.Key)
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	rh := remoting.GetKVConfigResponseHeader{Value: v}
	resp.ExtFields = rh.Encode()
	return resp
}
