package broker

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratamq/stratamq/remoting"
)

// Metrics are the broker's Prometheus series, named as RocketMQ's exporter
// names them where one exists. A nil *Metrics records nothing.
type Metrics struct {
	reg      prometheus.Registerer
	refused  *prometheus.CounterVec
	inMsgs   *prometheus.CounterVec
	outMsgs  *prometheus.CounterVec
	inBytes  *prometheus.CounterVec
	outBytes *prometheus.CounterVec

	// in and out cache each topic's children (topic → *topicCounters), so
	// a send does not hash its label on every message.
	in, out sync.Map

	haRecv   haReceived                      // stratamq_ha_received_bytes_total (WatchHASlave)
	haAlone  haReceived                      // stratamq_ha_acked_alone_total (WatchHAAlone), registered by WatchHA
	haStatus atomic.Pointer[func() HAStatus] // the running broker's (WatchHA)
	// storeStats is the running broker's store and lag series (WatchStore).
	storeStats atomic.Pointer[func() storeStats]

	// servers holds, per WatchServer name, the server its gauges read
	// (*atomic.Pointer[remoting.Server]): a later broker generation on the
	// same Metrics (Node) swaps the server in.
	servers sync.Map
}

type topicCounters struct{ msgs, bytes prometheus.Counter }

func (m *Metrics) counters(cache *sync.Map, msgs, bytes *prometheus.CounterVec, topic string) *topicCounters {
	if v, ok := cache.Load(topic); ok {
		return v.(*topicCounters)
	}
	tc := &topicCounters{msgs: msgs.WithLabelValues(topic), bytes: bytes.WithLabelValues(topic)}
	v, _ := cache.LoadOrStore(topic, tc)
	return v.(*topicCounters)
}

// NewMetrics registers the broker's series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reg: reg,
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stratamq_connections_refused_total",
			Help: "Connections closed at accept because a cap was reached, by server and cap (total, per_ip)."},
			[]string{"server", "cap"}),
		inMsgs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketmq_messages_in_total", Help: "Messages stored, by topic."}, []string{"topic"}),
		outMsgs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketmq_messages_out_total", Help: "Messages delivered by pulls, by topic."}, []string{"topic"}),
		inBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketmq_throughput_in_total", Help: "Message body bytes stored, by topic."}, []string{"topic"}),
		outBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketmq_throughput_out_total", Help: "Record bytes delivered by pulls, by topic."}, []string{"topic"}),
	}
	reg.MustRegister(m.refused, m.inMsgs, m.outMsgs, m.inBytes, m.outBytes)
	return m
}

func (m *Metrics) messagesIn(topic string, n, bytes int) {
	if m == nil {
		return
	}
	tc := m.counters(&m.in, m.inMsgs, m.inBytes, topic)
	tc.msgs.Add(float64(n))
	tc.bytes.Add(float64(bytes))
}

func (m *Metrics) messagesOut(topic string, n, bytes int) {
	if m == nil {
		return
	}
	tc := m.counters(&m.out, m.outMsgs, m.outBytes, topic)
	tc.msgs.Add(float64(n))
	tc.bytes.Add(float64(bytes))
}

// ConnRefused is a remoting.ServerConfig.OnRefuse for the server named
// server (nil when m is).
func (m *Metrics) ConnRefused(server string) func(limit string) {
	if m == nil {
		return nil
	}
	return func(limit string) { m.refused.WithLabelValues(server, limit).Inc() }
}

// WatchServer exports s's open connections and read memory in use as
// gauges labelled server. Watching another server under the same name
// (the next broker generation of a Node) moves the gauges to it.
func (m *Metrics) WatchServer(server string, s *remoting.Server) {
	if m == nil {
		return
	}
	p := &atomic.Pointer[remoting.Server]{}
	if v, loaded := m.servers.LoadOrStore(server, p); loaded {
		v.(*atomic.Pointer[remoting.Server]).Store(s)
		return
	}
	p.Store(s)
	stats := func() remoting.ServerStats { return p.Load().Stats() }
	labels := prometheus.Labels{"server": server}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stratamq_connections", ConstLabels: labels,
			Help: "Open remoting connections."}, func() float64 { return float64(stats().Conns) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stratamq_read_memory_bytes", ConstLabels: labels,
			Help: "Bytes of requests being read or waiting to be handled (bounded by STRATAMQ_MAX_READ_MEMORY)."},
			func() float64 { return float64(stats().ReadMemory) }),
	)
}

// haReceived sums a count each broker generation keeps from 0: the bytes
// the slaves this broker ran received over HA, or the sends its masters
// acknowledged alone.
type haReceived struct {
	once sync.Once
	mu   sync.Mutex
	done int64        // bytes of the slaves replaced
	cur  func() int64 // the running slave's count
}

// WatchHASlave exports stratamq_ha_received_bytes_total, the commitlog
// bytes received over HA, from received (the running ha.Slave's count; a
// later call replaces it and keeps what was counted).
func (m *Metrics) WatchHASlave(received func() int64) {
	if m == nil {
		return
	}
	h := &m.haRecv
	h.mu.Lock()
	if h.cur != nil {
		h.done += h.cur()
	}
	h.cur = received
	h.mu.Unlock()
	h.once.Do(func() {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "stratamq_ha_received_bytes_total",
			Help: "Commitlog bytes a slave received over HA (a slave booted from the bucket receives only the tail)."},
			func() float64 {
				h.mu.Lock()
				defer h.mu.Unlock()
				return float64(h.done + h.cur())
			}))
	})
}

// WatchHAAlone counts in stratamq_ha_acked_alone_total the sends a
// sync_master acknowledged with no slave holding them
// (STRATAMQ_HA_MIN_INSYNC=1), from alone (the running ha.Master's count; a
// later call, the next master generation, keeps what was counted).
func (m *Metrics) WatchHAAlone(alone func() int64) {
	if m == nil {
		return
	}
	h := &m.haAlone
	h.mu.Lock()
	if h.cur != nil {
		h.done += h.cur()
	}
	h.cur = alone
	h.mu.Unlock()
}

// WatchHA exports the broker's HA status, read from status at each scrape
// (so every series exists from the start, before any traffic):
// stratamq_ha_role{role} (1 for the current role, 0 for the others),
// stratamq_ha_epoch, stratamq_ha_failovers_total,
// stratamq_ha_peers_connected (a master's connected slaves; 1 while a
// slave's stream is up), stratamq_ha_insync_replicas (a master: itself and
// its slaves in sync; 0 on a slave), stratamq_ha_acked_alone_total
// (WatchHAAlone), and stratamq_ha_replication_lag_bytes and
// _seconds{peer} (on a master one per connected slave, peer its address;
// on a slave one, peer its master's HA address). HAStatus defines the lag
// in time.
//
// A later call (the next broker generation of a Node) replaces status.
func (m *Metrics) WatchHA(status func() HAStatus) {
	if m == nil {
		return
	}
	if m.haStatus.Swap(&status) == nil {
		m.reg.MustRegister(haCollector{func() HAStatus { return (*m.haStatus.Load())() }})
		h := &m.haAlone
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "stratamq_ha_acked_alone_total",
			Help: "Sends a sync_master acknowledged with no slave holding them: STRATAMQ_HA_MIN_INSYNC=1 while no slave was in sync."},
			func() float64 {
				h.mu.Lock()
				defer h.mu.Unlock()
				if h.cur == nil {
					return float64(h.done)
				}
				return float64(h.done + h.cur())
			}))
	}
}

var (
	haRoleDesc = prometheus.NewDesc("stratamq_ha_role",
		"The broker's HA role: 1 for the role it plays now, 0 for the others.", []string{"role"}, nil)
	haEpochDesc = prometheus.NewDesc("stratamq_ha_epoch",
		"A master's lease epoch (0 without a bucket); on a slave the highest master epoch seen.", nil, nil)
	haFailoversDesc = prometheus.NewDesc("stratamq_ha_failovers_total",
		"Role changes since start: failover promotions and demotions, admin promote/demote.", nil, nil)
	haPeersDesc = prometheus.NewDesc("stratamq_ha_peers_connected",
		"A master's connected slaves; on a slave 1 while its stream from the master is up.", nil, nil)
	haInSyncDesc = prometheus.NewDesc("stratamq_ha_insync_replicas",
		"A master: copies in the in-sync set, itself and its slaves in sync (connected, within STRATAMQ_HA_MAX_LAG, no ack deadline missed since they caught up); 0 on a slave.", nil, nil)
	haLagBytesDesc = prometheus.NewDesc("stratamq_ha_replication_lag_bytes",
		"Commitlog bytes a slave lacks: per slave on a master (peer: its address), on a slave (peer: the master).",
		[]string{"peer"}, nil)
	haLagSecondsDesc = prometheus.NewDesc("stratamq_ha_replication_lag_seconds",
		"A master: age of the oldest byte the slave has not acknowledged; a slave: time since it last held the master's end.",
		[]string{"peer"}, nil)
)

var haRoles = []string{RoleAsyncMaster, RoleSyncMaster, RoleSlave}

type haCollector struct{ status func() HAStatus }

func (haCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{haRoleDesc, haEpochDesc, haFailoversDesc, haPeersDesc, haInSyncDesc, haLagBytesDesc, haLagSecondsDesc} {
		ch <- d
	}
}

func (c haCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.status()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, r := range haRoles {
		v := 0.0
		if r == st.Role {
			v = 1
		}
		gauge(haRoleDesc, v, r)
	}
	gauge(haEpochDesc, float64(st.Epoch))
	ch <- prometheus.MustNewConstMetric(haFailoversDesc, prometheus.CounterValue, float64(st.Failovers))
	gauge(haInSyncDesc, float64(st.InSyncReplicas))
	if f := st.Follow; f != nil {
		up := 0.0
		if f.Connected {
			up = 1
		}
		gauge(haPeersDesc, up)
		gauge(haLagBytesDesc, float64(f.LagBytes), f.MasterAddr)
		gauge(haLagSecondsDesc, f.LagSeconds, f.MasterAddr)
		return
	}
	gauge(haPeersDesc, float64(len(st.Slaves)))
	for _, s := range st.Slaves {
		gauge(haLagBytesDesc, float64(s.LagBytes), s.Addr)
		gauge(haLagSecondsDesc, s.LagSeconds, s.Addr)
	}
}
