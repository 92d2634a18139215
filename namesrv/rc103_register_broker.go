package namesrv

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// orderTopicConfigNamespace is the KV namespace whose entries (topic →
// "brokerA:4;brokerB:8") become a route's orderTopicConf and the body of a
// REGISTER_BROKER response.
const orderTopicConfigNamespace = "ORDER_TOPIC_CONFIG"

// registerBroker handles REGISTER_BROKER (103).
func (ns *NameServer) registerBroker(c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var h remoting.RegisterBrokerRequestHeader
	if err := h.Decode(req.ExtFields); err != nil {
		return badRequest(req, err)
	}
	if h.BodyCrc32 != 0 {
		sum := crc32.ChecksumIEEE(req.Body)
		// Java sends UtilAll.crc32: the CRC masked to 31 bits.
		if int32(sum&0x7FFFFFFF) != h.BodyCrc32 && int32(sum) != h.BodyCrc32 {
			return remoting.NewResponse(req, remoting.SystemError, "crc32 not match")
		}
	}
	if h.Compressed {
		return remoting.NewResponse(req, remoting.SystemError,
			"compressed REGISTER_BROKER bodies are not supported by this name server; set compressedRegister=false on the broker")
	}
	var body remoting.RegisterBrokerBody
	if len(req.Body) > 0 {
		if err := json.Unmarshal(remoting.QuoteIntegerKeys(req.Body), &body); err != nil {
			return remoting.NewResponse(req, remoting.SystemError, fmt.Sprintf("register broker body: %v", err))
		}
	}
	var connID uint64
	if c != nil {
		connID = c.ID()
	}
	rh, first, skipped := ns.register(h, body, connID)
	if len(skipped) > 0 {
		ns.log.Warn("namesrv: broker registered topics with invalid names; they get no route", "broker", h.BrokerName,
			"addr", h.BrokerAddr, "topics", len(skipped), "first", skipped[0])
	}
	if first {
		ns.log.Info("namesrv: broker registered", "cluster", h.ClusterName, "broker", h.BrokerName,
			"id", h.BrokerID, "addr", h.BrokerAddr, "topics", len(body.TopicConfigSerializeWrapper.TopicConfigTable))
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.ExtFields = rh.Encode()
	ns.mu.RLock()
	if kv := ns.mu.kv[orderTopicConfigNamespace]; len(kv) > 0 {
		resp.Body, _ = json.Marshal(remoting.KVTable{Table: kv})
	}
	ns.mu.RUnlock()
	return resp
}

// register applies one registration and returns the response header,
// whether this address was new under that id, and the remarks of the
// topics skipped because their names fail remoting.ValidateTopic.
func (ns *NameServer) register(h remoting.RegisterBrokerRequestHeader, body remoting.RegisterBrokerBody, connID uint64) (rh remoting.RegisterBrokerResponseHeader, first bool, skipped []string) {
	now := ns.cfg.Clock()
	timeout := ns.cfg.BrokerExpiry
	if h.HeartbeatTimeoutMillis > 0 {
		timeout = time.Duration(h.HeartbeatTimeoutMillis) * time.Millisecond
	}
	wrapper := body.TopicConfigSerializeWrapper

	ns.mu.Lock()
	defer ns.mu.Unlock()

	names := ns.mu.clusters[h.ClusterName]
	if names == nil {
		names = make(map[string]struct{})
		ns.mu.clusters[h.ClusterName] = names
	}
	names[h.BrokerName] = struct{}{}

	bd := ns.mu.brokers[h.BrokerName]
	if bd == nil {
		bd = &remoting.BrokerData{Cluster: h.ClusterName, BrokerName: h.BrokerName, BrokerAddrs: map[int64]string{}}
		ns.mu.brokers[h.BrokerName] = bd
	}
	// The same address under another id (a slave promoted, or re-numbered)
	// replaces its old entry.
	for id, addr := range bd.BrokerAddrs {
		if addr == h.BrokerAddr && id != h.BrokerID {
			delete(bd.BrokerAddrs, id)
		}
	}
	old, had := bd.BrokerAddrs[h.BrokerID]
	bd.BrokerAddrs[h.BrokerID] = h.BrokerAddr
	// An address that replaced another under the same id leaves the old
	// one's liveness entry behind; drop it.
	if had && old != h.BrokerAddr {
		delete(ns.mu.live, brokerKey{h.ClusterName, old})
	}

	key := brokerKey{h.ClusterName, h.BrokerAddr}
	prev := ns.mu.live[key]
	first = !had || old != h.BrokerAddr || prev == nil

	if h.BrokerID == remoting.MasterID {
		changed := prev == nil || !prev.dataVersion.Equal(wrapper.DataVersion)
		if first || changed {
			for topic, tc := range wrapper.TopicConfigTable {
				if topic == "" {
					topic = tc.TopicName
				}
				if err := remoting.ValidateTopic(topic); err != nil {
					skipped = append(skipped, err.Error())
					continue
				}
				qds := ns.mu.topics[topic]
				if qds == nil {
					qds = make(map[string]remoting.QueueData)
					ns.mu.topics[topic] = qds
				}
				qds[h.BrokerName] = remoting.QueueData{
					BrokerName:     h.BrokerName,
					ReadQueueNums:  tc.ReadQueueNums,
					WriteQueueNums: tc.WriteQueueNums,
					Perm:           tc.Perm,
					TopicSysFlag:   tc.TopicSysFlag,
				}
			}
		}
	}

	ns.mu.live[key] = &liveBroker{
		brokerName:   h.BrokerName,
		brokerID:     h.BrokerID,
		lastUpdate:   now,
		timeout:      timeout,
		dataVersion:  wrapper.DataVersion,
		haServerAddr: h.HAServerAddr,
		connID:       connID,
	}

	if h.BrokerID != remoting.MasterID {
		if masterAddr, ok := bd.BrokerAddrs[remoting.MasterID]; ok {
			if m := ns.mu.live[brokerKey{h.ClusterName, masterAddr}]; m != nil {
				rh.HAServerAddr = m.haServerAddr
				rh.MasterAddr = masterAddr
			}
		}
	}
	return rh, first, skipped
}
