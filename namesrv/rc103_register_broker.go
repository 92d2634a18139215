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
	rh, first, skipped, refused := ns.register(h, body, connID)
	if refused != "" {
		ns.warnLimited("namesrv: registration refused", "cluster", h.ClusterName, "broker", h.BrokerName,
			"id", h.BrokerID, "addr", h.BrokerAddr, "peer", peerOf(c), "reason", refused)
		return remoting.NewResponse(req, remoting.NoPermission, refused)
	}
	ns.hold.registered(h.BrokerName) // the tables route it now: held route answers go out
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
// topics skipped because their names fail remoting.ValidateTopic; or,
// changing nothing, why it refused the registration (refuseTakeoverLocked).
func (ns *NameServer) register(h remoting.RegisterBrokerRequestHeader, body remoting.RegisterBrokerBody, connID uint64) (rh remoting.RegisterBrokerResponseHeader, first bool, skipped []string, refused string) {
	now := ns.cfg.Clock()
	timeout := ns.cfg.BrokerExpiry
	if h.HeartbeatTimeoutMillis > 0 {
		timeout = time.Duration(h.HeartbeatTimeoutMillis) * time.Millisecond
	}
	wrapper := body.TopicConfigSerializeWrapper

	ns.mu.Lock()
	defer ns.mu.Unlock()

	if refused = ns.refuseTakeoverLocked(h, connID); refused != "" {
		return rh, false, nil, refused
	}

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
	return rh, first, skipped, ""
}

// aliveLocked reports whether a registration has not expired.
func (ns *NameServer) aliveLocked(lb *liveBroker) bool {
	return ns.cfg.Clock().Sub(lb.lastUpdate) <= lb.timeout
}

// refuseTakeoverLocked says why a registration would take over another
// broker's live registration, or "" when it does not. A registration is
// live from its REGISTER_BROKER until it expires, its conn closes, or its
// broker unregisters. While it is live:
//
//   - its address may be registered again only from the same conn (a
//     registration from another conn would rebind the address to a conn
//     whose closing then removed the real broker);
//   - its broker name and id may not be claimed by another address,
//     except from the same conn (the same broker re-registering under a
//     new address);
//   - its broker name may not be registered under another cluster.
//
// A restarted broker registers on a new conn after its old conn closed,
// which removed its registration, so it is not refused. Registrations
// without a conn (connID 0) bind nothing.
func (ns *NameServer) refuseTakeoverLocked(h remoting.RegisterBrokerRequestHeader, connID uint64) string {
	otherConn := func(lb *liveBroker) bool { return lb.connID != 0 && lb.connID != connID && ns.aliveLocked(lb) }
	if lb := ns.mu.live[brokerKey{h.ClusterName, h.BrokerAddr}]; lb != nil && otherConn(lb) {
		return fmt.Sprintf("broker address %s (broker %s, id %d) is registered on another connection; "+
			"it cannot be registered from this one while that registration is alive", h.BrokerAddr, lb.brokerName, lb.brokerID)
	}
	bd := ns.mu.brokers[h.BrokerName]
	if bd == nil {
		return ""
	}
	if bd.Cluster != h.ClusterName {
		for _, addr := range bd.BrokerAddrs {
			if lb := ns.mu.live[brokerKey{bd.Cluster, addr}]; lb != nil && ns.aliveLocked(lb) {
				return fmt.Sprintf("broker name %s is registered in cluster %s (from %s); it cannot be registered in cluster %s while that registration is alive",
					h.BrokerName, bd.Cluster, addr, h.ClusterName)
			}
		}
		return ""
	}
	old, ok := bd.BrokerAddrs[h.BrokerID]
	if !ok || old == h.BrokerAddr {
		return ""
	}
	lb := ns.mu.live[brokerKey{bd.Cluster, old}]
	if lb == nil || !ns.aliveLocked(lb) || lb.connID != 0 && lb.connID == connID {
		return ""
	}
	return fmt.Sprintf("broker %s id %d is registered from %s; a registration from %s is refused while that one is alive "+
		"(it ends when that broker unregisters, its connection closes, or it misses its heartbeats for %s)",
		h.BrokerName, h.BrokerID, old, h.BrokerAddr, lb.timeout)
}
