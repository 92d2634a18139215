package broker

import (
	"context"
	"encoding/json"
	"sort"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/ha"
)

// HAStatus is the broker's replication state (issue 10 item 6): what
// `stratamq admin haStatus`, GET_BROKER_HA_STATUS (907), GET /ha and the
// stratamq_ha_* series show. Every field is read when HAStatus is called.
//
// Lag in time, defined on each side from what that side knows:
//
//   - On a master, per slave: the age of the oldest byte the slave has not
//     acknowledged, now − the STORETIMESTAMP of the record at the slave's
//     acked offset; 0 once it acked the whole log. A slave 200 ms behind a
//     steady stream shows ≈ 0.2 s however much it sends, and a slave
//     catching up an hour of history shows an hour.
//   - On a slave: the time since it last held the master's end, as the
//     master's last transfer or heartbeat stated it (ha.SlaveState
//     LastCaughtUp; since it started when it never has); 0 while it holds
//     it. Without a connection both stay as last known: Connected says so.
type HAStatus struct {
	Role       string `json:"role"` // async_master | sync_master | slave
	Cluster    string `json:"cluster"`
	BrokerName string `json:"brokerName"`
	BrokerID   int64  `json:"brokerId"`
	BrokerAddr string `json:"brokerAddr"` // the advertised remoting address
	// Epoch is, on a master, its lease epoch (0 without a bucket); on a
	// slave, the highest master epoch it has seen.
	Epoch     int64 `json:"epoch"`
	LocalEnd  int64 `json:"localEnd"`  // end of the local commitlog (MaxPhysOffset)
	Failovers int64 `json:"failovers"` // the Node's role changes (failover, admin promote/demote) since it started

	HAListen string `json:"haListen,omitempty"` // master: the HA listener's address
	// The in-sync set (STRATAMQ_HA_MIN_INSYNC), on a master: MinInSync is
	// the setting; InSyncReplicas counts the master and its slaves in
	// sync; AckingAlone is set while a sync_master acknowledges sends with
	// no slave (MinInSync 1, no slave in sync); AckedAlone counts the sends
	// this master acknowledged so since it became master.
	MinInSync      int       `json:"minInSync,omitempty"`
	InSyncReplicas int       `json:"inSyncReplicas"`
	AckingAlone    bool      `json:"ackingAlone"`
	AckedAlone     int64     `json:"ackedAlone"`
	Slaves         []HASlave `json:"slaves,omitempty"` // master: the connected slaves, by address
	Follow         *HAFollow `json:"follow,omitempty"` // slave: its stream from the master

	Time time.Time `json:"time"` // when this was read
}

// HASlave is a master's view of one connected slave.
type HASlave struct {
	Addr       string  `json:"addr"`       // the slave's end of the HA connection
	BrokerName string  `json:"brokerName"` // from its hello
	Start      int64   `json:"start"`      // where streaming to it began
	Acked      int64   `json:"acked"`      // its last report: the end of its log
	LagBytes   int64   `json:"lagBytes"`   // LocalEnd − Acked
	LagSeconds float64 `json:"lagSeconds"` // age of the oldest unacknowledged byte
	// InSync: in the in-sync set (ha/insync.go): LagBytes ≤
	// STRATAMQ_HA_MAX_LAG and no ack deadline (STRATAMQ_HA_ACK_TIMEOUT)
	// missed since it last caught up.
	InSync     bool      `json:"inSync"`
	LastReport time.Time `json:"lastReport"`
}

// HAFollow is a slave's view of its stream from the master.
type HAFollow struct {
	MasterAddr   string    `json:"masterAddr"`             // the master's HA address (the one dialled last, else STRATAMQ_HA_MASTER)
	MasterBroker string    `json:"masterBroker,omitempty"` // the master's remoting address, from its hello reply
	Connected    bool      `json:"connected"`
	MasterEnd    int64     `json:"masterEnd"`  // the master's end of log, from its last transfer
	LagBytes     int64     `json:"lagBytes"`   // MasterEnd − LocalEnd
	LagSeconds   float64   `json:"lagSeconds"` // time since it last held MasterEnd
	LastCaughtUp time.Time `json:"lastCaughtUp,omitzero"`
	Sessions     int64     `json:"sessions"` // connections that passed the hello
	Refused      int64     `json:"refused"`  // connections dropped for an older epoch
	Received     int64     `json:"received"` // bytes appended from the stream
}

// haStatusState is what HAStatus needs besides the HA parts themselves.
type haStatusState struct {
	since     time.Time    // when New finished: a slave that never caught up lags since then
	failovers atomic.Int64 // Node.Run sets it for each generation (setFailovers): its RoleChanges
}

// initHAStatus is New's last step: HAStatus may be called (scraped) from
// here on.
func (b *Broker) initHAStatus(m *Metrics) {
	b.hastat.since = time.Now()
	m.WatchHA(b.HAStatus)
	m.WatchStore(b.storeStats) // metrics_store.go
	var topics []string
	for _, tc := range b.topicConfigs() {
		topics = append(topics, tc.TopicName)
	}
	m.seedTopicCounters(topics)
}

// setFailovers sets the failover count HAStatus reports: the Node's role
// changes before this generation.
func (b *Broker) setFailovers(n int64) { b.hastat.failovers.Store(n) }

// upSince is when New finished (bootTimestamp, the console's Since).
func (b *Broker) upSince() time.Time { return b.hastat.since }

// haRole is the role the broker plays now (a Node runs each role as a
// broker generation of its own).
func (b *Broker) haRole() string { return b.cfg.Role }

// HAStatus reads the broker's replication state now.
func (b *Broker) HAStatus() HAStatus {
	now := time.Now()
	st := HAStatus{Role: b.haRole(), Cluster: b.cfg.Cluster, BrokerName: b.cfg.BrokerName, BrokerID: b.cfg.BrokerID,
		BrokerAddr: b.advertise, LocalEnd: b.store.MaxPhysOffset(), Failovers: b.hastat.failovers.Load(), Time: now}
	if st.Role == RoleSlave {
		f := &HAFollow{MasterAddr: b.cfg.HAMaster}
		if s := b.repl.Slave(); s != nil { // set by startHA: HAStatus may run on any goroutine
			ss := s.State()
			st.Epoch = ss.Epoch
			f.Connected, f.MasterEnd, f.LagBytes, f.LastCaughtUp = ss.Connected, ss.MasterMax, ss.Lag, ss.LastCaughtUp
			f.Sessions, f.Refused, f.Received = ss.Sessions, ss.Refused, ss.Received
			f.MasterBroker = ss.MasterAddr
			if ss.Dialed != "" {
				f.MasterAddr = ss.Dialed
			}
		}
		if f.LagBytes > 0 {
			since := f.LastCaughtUp
			if since.IsZero() {
				since = b.hastat.since
			}
			f.LagSeconds = max(0, now.Sub(since).Seconds())
		}
		st.Follow = f
		return st
	}
	st.Epoch = b.epoch()
	st.MinInSync, st.InSyncReplicas = b.cfg.HAMinInSync, 1
	m := b.repl.Master()
	if m == nil {
		return st
	}
	st.AckedAlone = m.AckedAlone()
	st.HAListen = m.Addr().String()
	for _, s := range m.Slaves() {
		lag := max(0, st.LocalEnd-s.Acked)
		st.Slaves = append(st.Slaves, HASlave{Addr: s.Remote, BrokerName: s.Name, Start: s.Start, Acked: s.Acked,
			LagBytes: lag, LagSeconds: b.unackedAge(s, st.LocalEnd, now), InSync: s.InSync,
			LastReport: s.LastReport})
		if s.InSync {
			st.InSyncReplicas++
		}
	}
	st.AckingAlone = st.Role == RoleSyncMaster && b.cfg.HAMinInSync <= 1 && st.InSyncReplicas == 1
	sort.Slice(st.Slaves, func(i, j int) bool { return st.Slaves[i].Addr < st.Slaves[j].Addr })
	return st
}

// unackedAge is the age in seconds of the oldest byte s has not acked (0
// when it acked end). When the record there cannot be read (a cold read
// failing) it is the time since s last reported, logged.
func (b *Broker) unackedAge(s ha.SlaveStatus, end int64, now time.Time) float64 {
	if s.Acked >= end {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ts, err := b.store.StoreTimeAt(ctx, s.Acked)
	if err != nil {
		b.log.Debug("HA status: no store time at a slave's acked offset; lag in time from its last report",
			"slave", s.Remote, "acked", s.Acked, "err", err)
		return max(0, now.Sub(s.LastReport).Seconds())
	}
	return max(0, now.Sub(time.UnixMilli(ts)).Seconds())
}

// HAStatusJSON is the body of GET_BROKER_HA_STATUS (907) and GET /ha: the
// HAStatus fields plus RocketMQ's HARuntimeInfo fields, so RocketMQ's
// mqadmin haStatus reads it too.
func (b *Broker) HAStatusJSON() []byte {
	st := b.HAStatus()
	body := haStatusBody{HAStatus: st}
	rt := &body.haRuntimeInfo
	rt.HAConnectionInfo = []haConnectionRuntimeInfo{}
	if st.Role == RoleSlave {
		if f := st.Follow; f != nil {
			rt.HAClientRuntimeInfo = haClientRuntimeInfo{MasterAddr: f.MasterAddr, MaxOffset: st.LocalEnd,
				Activated: f.Connected}
		}
	} else {
		rt.Master, rt.MasterCommitLogMaxOffset = true, st.LocalEnd
		for _, s := range st.Slaves {
			if s.InSync {
				rt.InSyncSlaveNums++
			}
			rt.HAConnectionInfo = append(rt.HAConnectionInfo, haConnectionRuntimeInfo{Addr: s.Addr,
				SlaveAckOffset: s.Acked, Diff: s.LagBytes, InSync: s.InSync, TransferFromWhere: s.Start})
		}
	}
	out, err := json.Marshal(body)
	if err != nil {
		panic("broker: encoding the HA status: " + err.Error()) // plain structs: cannot fail
	}
	return out
}

// haStatusBody flattens HAStatus and RocketMQ's HARuntimeInfo into one
// JSON object.
type haStatusBody struct {
	HAStatus
	haRuntimeInfo
}

// haRuntimeInfo is RocketMQ 5's HARuntimeInfo (remoting/protocol/body).
type haRuntimeInfo struct {
	Master                   bool                      `json:"master"`
	MasterCommitLogMaxOffset int64                     `json:"masterCommitLogMaxOffset"`
	InSyncSlaveNums          int                       `json:"inSyncSlaveNums"`
	HAConnectionInfo         []haConnectionRuntimeInfo `json:"haConnectionInfo"`
	HAClientRuntimeInfo      haClientRuntimeInfo       `json:"haClientRuntimeInfo"`
}

type haConnectionRuntimeInfo struct {
	Addr                    string `json:"addr"`
	SlaveAckOffset          int64  `json:"slaveAckOffset"`
	Diff                    int64  `json:"diff"`
	InSync                  bool   `json:"inSync"`
	TransferredByteInSecond int64  `json:"transferredByteInSecond"`
	TransferFromWhere       int64  `json:"transferFromWhere"`
}

type haClientRuntimeInfo struct {
	MasterAddr              string `json:"masterAddr"`
	TransferredByteInSecond int64  `json:"transferredByteInSecond"`
	MaxOffset               int64  `json:"maxOffset"`
	LastReadTimestamp       int64  `json:"lastReadTimestamp"`
	LastWriteTimestamp      int64  `json:"lastWriteTimestamp"`
	MasterFlushOffset       int64  `json:"masterFlushOffset"`
	Activated               bool   `json:"activated"`
}
