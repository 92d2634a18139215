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
//
// A session belongs to the caller that opened it (owner): the access key
// of its authorization header ("" without an ACL, or for a white-listed
// peer that sent none) and its connection (the peer's address and port).
// Only a caller of the same account may replace it (a client reconnecting
// opens a new stream) or speak for its client id; only the same account
// on the same connection may terminate it.
type session struct {
	clientID string
	owner    caller
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

// add makes se its client's session, replacing one of the same account
// (the client reconnected); a live session of another account keeps the
// client id and add answers why not.
func (ss *sessions) add(se *session) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if cur := ss.m[se.clientID]; cur != nil && cur != se && cur.owner.account != se.owner.account && !cur.ended() {
		return errClientIDTaken(se.clientID)
	}
	ss.m[se.clientID] = se
	return nil
}

// errClientIDTaken: another account's session holds the client id.
func errClientIDTaken(id string) error {
	return bad(apiv2.Code_FORBIDDEN, "client id %q has a telemetry session of another account: a client id is bound to the account that opened its session", id)
}

// ended reports whether the session's stream has ended.
func (se *session) ended() bool {
	select {
	case <-se.done:
		return true
	default:
		return false
	}
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

// of is the session of clientID when it belongs to c's account, else nil.
func (ss *sessions) of(c caller, clientID string) *session {
	se := ss.get(clientID)
	if se == nil || se.owner.account != c.account {
		return nil
	}
	return se
}

// noteTxTopic records that the client sent a transactional message to
// topic: it can be asked about it. Only the client's own account's sends
// count (c: the sender).
func (ss *sessions) noteTxTopic(c caller, clientID, topic string) {
	se := ss.of(c, clientID)
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

// touch records a heartbeat of the client by c; a session of another
// account is not c's to keep alive (errClientIDTaken).
func (ss *sessions) touch(c caller, clientID string) error {
	se := ss.get(clientID)
	if se == nil {
		return nil
	}
	if se.owner.account != c.account {
		return errClientIDTaken(clientID)
	}
	se.mu.Lock()
	se.seen = time.Now()
	se.mu.Unlock()
	return nil
}

// terminate forgets a client that said it is going away: only its owner,
// the same account on the same connection, may say so. It reports
// whether a session was dropped.
func (ss *sessions) terminate(c caller, clientID string) (bool, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	se := ss.m[clientID]
	if se == nil {
		return false, nil
	}
	if se.owner != c {
		return false, bad(apiv2.Code_FORBIDDEN, "client id %q: its telemetry session was opened by another account or connection; only that one may terminate it", clientID)
	}
	delete(ss.m, clientID)
	return true, nil
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
