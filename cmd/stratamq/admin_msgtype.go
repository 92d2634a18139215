package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/stratamq/stratamq/remoting"
)

// A topic's attributes (its message.type among them) as topicRoute and
// topicStatus show them: the route the name servers give holds none, so
// they are read from each master of the route (GET_ALL_TOPIC_CONFIG, 21).

// unsetMessageType is what the tables show for a topic without the
// message.type attribute: it takes every kind of message.
const unsetMessageType = "(unset: any)"

// topicConfigsOf is topic's configuration on each master of route r, by
// broker name. A master that does not answer, or refuses (under an ACL
// the request needs an admin account), is left out, noted on stderr: the
// command still prints what the route says.
func (e *adminEnv) topicConfigsOf(ctx context.Context, topic string, r *remoting.TopicRouteData) map[string]remoting.TopicConfig {
	out := map[string]remoting.TopicConfig{}
	for _, bd := range r.BrokerDatas {
		addr, ok := bd.BrokerAddrs[remoting.MasterID]
		if !ok {
			continue
		}
		resp, err := e.invoke(ctx, addr, remoting.NewRequest(remoting.GetAllTopicConfig, nil, nil))
		if err != nil {
			fmt.Fprintf(e.stderr, "the attributes of %s on %s: %v\n", topic, addr, err)
			continue
		}
		var w remoting.TopicConfigSerializeWrapper
		if err := json.Unmarshal(remoting.QuoteIntegerKeys(resp.Body), &w); err != nil {
			fmt.Fprintf(e.stderr, "the topic config of %s does not decode: %v\n", addr, err)
			continue
		}
		if tc, ok := w.TopicConfigTable[topic]; ok {
			out[bd.BrokerName] = tc
		}
	}
	return out
}

// messageTypeCell is a topic's message.type for a table ("?" when its
// configuration could not be read).
func messageTypeCell(tc remoting.TopicConfig, ok bool) string {
	switch v, set := tc.Attributes[remoting.MessageTypeAttribute]; {
	case !ok:
		return "?"
	case !set:
		return unsetMessageType
	default:
		return v
	}
}

// attributesCell is a topic's attributes, k=v sorted by key and joined
// by commas ("-" for none, "?" when they could not be read).
func attributesCell(tc remoting.TopicConfig, ok bool) string {
	if !ok {
		return "?"
	}
	if len(tc.Attributes) == 0 {
		return "-"
	}
	kv := make([]string, 0, len(tc.Attributes))
	for k, v := range tc.Attributes {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}
