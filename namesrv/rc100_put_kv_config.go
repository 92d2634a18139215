package namesrv

import (
	"fmt"
	"strings"

	"github.com/stratamq/stratamq/remoting"
)

// putKVConfig handles PUT_KV_CONFIG (100). The namespace and the key must
// be non-blank and at most kvNameMaxLen bytes (RocketMQ checks neither; keys
// are often addresses or topics, so no charset is imposed).
func (ns *NameServer) putKVConfig(req *remoting.Command) *remoting.Command {
	var h remoting.KVConfigHeader
	if err := h.DecodePut(req.ExtFields); err != nil {
		return badRequest(req, err)
	}
	if r := badKVName(req, "namespace", h.Namespace); r != nil {
		return r
	}
	if r := badKVName(req, "key", h.Key); r != nil {
		return r
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

// kvNameMaxLen bounds a KV namespace and key.
const kvNameMaxLen = 255

func badKVName(req *remoting.Command, what, s string) *remoting.Command {
	switch {
	case strings.TrimSpace(s) == "":
		return remoting.NewResponse(req, remoting.SystemError, fmt.Sprintf("the KV config %s %s is blank", what, remoting.QuoteName(s)))
	case len(s) > kvNameMaxLen:
		return remoting.NewResponse(req, remoting.SystemError, fmt.Sprintf("the KV config %s %s is longer than %d bytes", what, remoting.QuoteName(s), kvNameMaxLen))
	}
	return nil
}
