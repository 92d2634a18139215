package proxy

import (
	"sync"
	"time"

	"github.com/stratamq/stratamq/proxy/apiv2"
)

// session is one client's Telemetry stream. Only the stream's own RPC
// goroutine writes to the stream: others hand it commands through out,
// which is bounded (a full queue drops the command, logged: a check is
// asked again next round).
type session struct {
	clientID string
	out      chan *apiv2.TelemetryCommand
	done     chan struct{} // closed when the stream ends

	mu       sync.Mutex
	settings *apiv2.Settings // the client's last Settings
	seen     time.Time
	// txTopics are topics the client sent transactional messages to that
	// its settings may not list yet (the clients add a topic on first
	// use and tell the server at the next settings sync, minutes later).
	txTopics map[string]bool
}

// clientType is the type the client's settings declare.
func (se *session) clientType() apiv2.ClientType {
	se.mu.Lock()
	defer se.mu.Unlock()
	return se.settings.GetClientType()
}

// publishes reports whether the client is a producer of topic.
func (se *session) publishes(topic string) bool {
	se.mu.Lock()
	defer se.mu.Unlock()
	if se.txTopics[topic] {
		return true
	}
	if se.settings.GetClientType() != apiv2.ClientType_PRODUCER {
		return false
	}
	for _, t := range se.settings.GetPublishing().GetTopics() {
		if resourceName(t) == topic {
			return true
		}
	}
	return false
}

// offer queues cmd for the stream; false when the queue is full or the
// stream has ended.
func (se *session) offer(cmd *apiv2.TelemetryCommand) bool {
	select {
	case <-se.done:
		return false
	default:
	}
	select {
	case se.out <- cmd:
		return true
	default:
		return false
	}
}

// sessions are the open Telemetry streams by client id; a client has at
// most one per endpoint (a new stream replaces the old one's entry).
type sessions struct {
	mu sync.Mutex
	m  map[string]*session
}

func (ss *sessions) add(se *session) {
	ss.mu.Lock()
	ss.m[se.clientID] = se
	ss.mu.Unlock()
}

// remove drops se if it is still the client's session; true if it was.
func (ss *sessions) remove(se *session) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.m[se.clientID] == se {
		delete(ss.m, se.clientID)
		return true
	}
	return false
}

func (ss *sessions) get(clientID string) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.m[clientID]
}

// noteTxTopic records that the client sent a transactional message to
// topic: it can be asked about it.
func (ss *sessions) noteTxTopic(clientID, topic string) {
	se := ss.get(clientID)
	if se == nil {
		return
	}
	se.mu.Lock()
	defer se.mu.Unlock()
	if se.txTopics == nil {
		se.txTopics = map[string]bool{}
	}
	if len(se.txTopics) < maxTxTopics {
		se.txTopics[topic] = true
	}
}

// maxTxTopics bounds the topics noted per session.
const maxTxTopics = 1024

// touch records a heartbeat of the client.
func (ss *sessions) touch(clientID string) {
	if se := ss.get(clientID); se != nil {
		se.mu.Lock()
		se.seen = time.Now()
		se.mu.Unlock()
	}
}

// terminate forgets a client that said it is going away.
func (ss *sessions) terminate(clientID string) {
	ss.mu.Lock()
	delete(ss.m, clientID)
	ss.mu.Unlock()
}

// producerOf is a live producer session publishing topic, nil if none.
func (ss *sessions) producerOf(topic string) *session {
	ss.mu.Lock()
	all := make([]*session, 0, len(ss.m))
	for _, se := range ss.m {
		all = append(all, se)
	}
	ss.mu.Unlock()
	for _, se := range all {
		if se.publishes(topic) {
			return se
		}
	}
	return nil
}

// count is the number of open sessions.
func (ss *sessions) count() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.m)
}
