package acl

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/stratamq/stratamq/remoting"
)

// Denial is why a request was refused. Its text names the access key,
// the resource and the permission it lacked; it never holds a secret.
type Denial struct {
	AccessKey string
	Reason    string
}

func (d *Denial) Error() string { return d.Reason }

// traceTopic is RocketMQ's message-trace topic: a request whose resources
// include a PUB to it skips the resource check (clients with tracing on
// send traces with their business account).
const traceTopic = "RMQ_SYS_TRACE_TOPIC"

// scope is which server checks: a broker checks every request; a name
// server only the codes that change routes or KV config.
type scope uint8

const (
	scopeBroker scope = iota
	scopeNamesrv
)

// peerView is what one connection's requests share: the verdicts that
// depend only on the rules, the peer's address and the access key. A
// view is immutable; a conn swaps in a new one when the rules or the
// access key it signs with change.
type peerView struct {
	rules       *Rules
	peer        netip.Addr
	globalWhite bool
	accessKey   string
	acct        *account // nil: no such account
	acctWhite   bool
}

func newPeerView(r *Rules, peer netip.Addr, accessKey string) *peerView {
	v := &peerView{rules: r, peer: peer, accessKey: accessKey}
	for i := range r.globalWhite {
		if r.globalWhite[i].match(peer) {
			v.globalWhite = true
			break
		}
	}
	if a := r.accounts[accessKey]; a != nil {
		v.acct = a
		v.acctWhite = a.white.match(peer)
	}
	return v
}

// peerSlot caches the current view of one conn.
type peerSlot struct {
	peer netip.Addr
	done <-chan struct{} // closed when the conn is; nil: never pruned
	view atomic.Pointer[peerView]
}

// verify checks one request against the view's rules (RocketMQ's
// PlainPermissionManager.validate): a globally white-listed peer passes;
// then the access key must name an account; a peer in the account's
// whiteRemoteAddress passes; else the signature must match, an admin code
// needs an admin account, and each resource its permission.
func (v *peerView) verify(req *remoting.Command, pairs []remoting.ExtField, sc scope) *Denial {
	code := remoting.RequestCode(req.Code)
	if v.globalWhite {
		return nil
	}
	if v.accessKey == "" {
		return &Denial{Reason: fmt.Sprintf("ACL: %s (%d) from %s is not signed (no AccessKey); sign it with an account of the ACL file",
			code, req.Code, v.peer)}
	}
	a := v.acct
	if a == nil {
		// An unknown key is echoed cut short: it is the client's text.
		ak := v.accessKey
		if len(ak) > 64 {
			ak = ak[:64] + "..."
		}
		return &Denial{AccessKey: ak, Reason: fmt.Sprintf("ACL: no account for accessKey %q", ak)}
	}
	if v.acctWhite {
		return nil
	}
	sig := lookup(pairs, KeySignature)
	if sig == "" {
		return &Denial{AccessKey: a.accessKey, Reason: fmt.Sprintf("ACL: %s (%d) with accessKey %q has no Signature", code, req.Code, a.accessKey)}
	}
	if !a.signatureOK(pairs, req.Body, sig) {
		return &Denial{AccessKey: a.accessKey, Reason: fmt.Sprintf("ACL: signature check failed for accessKey %q (wrong secretKey, or the request was changed)", a.accessKey)}
	}
	var n needs
	switch sc {
	case scopeNamesrv:
		n.admin = true
	default:
		n = brokerNeeds(code, pairs, req.Body)
	}
	if n.admin && !a.admin {
		return &Denial{AccessKey: a.accessKey, Reason: fmt.Sprintf("ACL: %s (%d) needs an admin account; accessKey %q is not admin", code, req.Code, a.accessKey)}
	}
	if n.n == 0 || !a.hasPerms && a.admin {
		return nil
	}
	for i := 0; i < n.n+len(n.more); i++ {
		x := n.at(i)
		if !x.group && x.name == traceTopic && x.perm == Pub {
			return nil
		}
	}
	for i := 0; i < n.n+len(n.more); i++ {
		x := n.at(i)
		owned, kind := a.owned(x)
		if !owned.Allows(x.perm) {
			return &Denial{AccessKey: a.accessKey, Reason: fmt.Sprintf("ACL: accessKey %q has no %s permission on %s %q (it has %s); %s (%d) needs it",
				a.accessKey, x.perm, kind, x.name, owned, code, req.Code)}
		}
	}
	return nil
}

func (n *needs) at(i int) need {
	if i < n.n {
		return n.fixed[i]
	}
	return n.more[i-n.n]
}

// signatureOK recomputes the signature over the request's fields (sorted
// in place) and body and compares it in constant time. With a
// SecurityToken or a _UNIQUE_KEY_QUERY field the Java and the Go clients
// sign different content: both are tried.
func (a *account) signatureOK(pairs []remoting.ExtField, body []byte, sig string) bool {
	sortPairs(pairs)
	h := a.mac()
	defer a.macs.Put(h)
	p := getBuf()
	mac, b := signContent(h, pairs, body, false, *p)
	ok := sigEqual(mac, sig)
	if !ok && (lookup(pairs, KeySecurityToken) != "" || lookup(pairs, keyUniqueQuery) != "") {
		h.Reset()
		mac, b = signContent(h, pairs, body, true, b)
		ok = sigEqual(mac, sig)
	}
	putBuf(p, b)
	return ok
}

// peers is the per-connection cache of an ACL. Slots of closed conns are
// dropped by ConnClosed, or, when nobody calls it, whenever the map has
// doubled since the last sweep.
type peers struct {
	mu      sync.RWMutex // guards m and sweepAt; never held across I/O
	m       map[uint64]*peerSlot
	sweepAt int
}

const minSweep = 256

func (p *peers) slot(id uint64, addr func() netip.Addr, done <-chan struct{}) *peerSlot {
	p.mu.RLock()
	s := p.m[id]
	p.mu.RUnlock()
	if s != nil {
		return s
	}
	s = &peerSlot{peer: addr(), done: done}
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.m[id]; old != nil {
		return old
	}
	p.m[id] = s
	if len(p.m) >= max(p.sweepAt, minSweep) {
		for k, v := range p.m {
			if v.done == nil {
				continue
			}
			select {
			case <-v.done:
				delete(p.m, k)
			default:
			}
		}
		p.sweepAt = 2 * len(p.m)
	}
	return s
}

func (p *peers) drop(id uint64) {
	p.mu.Lock()
	delete(p.m, id)
	p.mu.Unlock()
}

// peerAddr is the IP of a conn's remote address.
func peerAddr(a net.Addr) netip.Addr {
	switch t := a.(type) {
	case *net.TCPAddr:
		ip, _ := netip.AddrFromSlice(t.IP)
		return ip.Unmap()
	case nil:
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// check verifies req from the conn with id and peer address (called only
// when the conn is new to the cache).
func (x *ACL) check(id uint64, addr func() netip.Addr, done <-chan struct{}, req *remoting.Command, sc scope) *Denial {
	if sc == scopeNamesrv && !namesrvAdminCodes[remoting.RequestCode(req.Code)] {
		return nil
	}
	var buf [40]remoting.ExtField
	pairs := req.AppendExtPairs(buf[:0])
	return x.viewOf(id, addr, done, pairs).verify(req, pairs, sc)
}

// viewOf is the cached view of conn id's peer under the access key pairs
// name, made anew when the rules or the key changed.
func (x *ACL) viewOf(id uint64, addr func() netip.Addr, done <-chan struct{}, pairs []remoting.ExtField) *peerView {
	r := x.rules.Load()
	ak := lookup(pairs, KeyAccessKey)
	s := x.peers.slot(id, addr, done)
	v := s.view.Load()
	if v == nil || v.rules != r || v.accessKey != ak {
		v = newPeerView(r, s.peer, ak)
		s.view.Store(v)
	}
	return v
}

// peerOf is c's id, peer address and done channel for the cache (zero
// for a nil c).
func peerOf(c *remoting.Conn) (id uint64, addr func() netip.Addr, done <-chan struct{}) {
	if c == nil {
		return 0, func() netip.Addr { return netip.Addr{} }, nil
	}
	return c.ID(), func() netip.Addr { return peerAddr(c.RemoteAddr()) }, c.Done()
}

// owned is the permission a has on x's resource, and the resource's kind.
func (a *account) owned(x need) (Perm, string) {
	if x.group {
		if p, ok := a.groups[x.name]; ok {
			return p, "group"
		}
		return a.defaultGroupPerm, "group"
	}
	if p, ok := a.topics[x.name]; ok {
		return p, "topic"
	}
	return a.defaultTopicPerm, "topic"
}

// Verify checks one request from peer against r without a cache (tests,
// tools). broker selects the broker's rules; otherwise the name
// server's.
func (r *Rules) Verify(peer netip.Addr, req *remoting.Command, broker bool) *Denial {
	sc := scopeBroker
	if !broker {
		sc = scopeNamesrv
		if !namesrvAdminCodes[remoting.RequestCode(req.Code)] {
			return nil
		}
	}
	pairs := req.AppendExtPairs(nil)
	return newPeerView(r, peer, lookup(pairs, KeyAccessKey)).verify(req, pairs, sc)
}

// allows checks one more resource for a request verify passed: a topic
// the broker found only while handling it (the stored message a
// send-back or a view by id reads).
func (v *peerView) allows(req *remoting.Command, topic string, perm Perm) *Denial {
	if v.globalWhite || v.acct == nil || v.acctWhite {
		return nil // white-listed; a missing account was refused by verify
	}
	a := v.acct
	if !a.hasPerms && a.admin {
		return nil
	}
	var n needs
	n.topic(topic, perm)
	if n.n == 0 {
		return nil
	}
	x := n.fixed[0]
	owned, kind := a.owned(x)
	if owned.Allows(x.perm) {
		return nil
	}
	// The remark does not name the resource: the record is at an offset
	// the caller chose, and it may not learn what it is.
	code := remoting.RequestCode(req.Code)
	return &Denial{AccessKey: a.accessKey, Reason: fmt.Sprintf("ACL: accessKey %q has no %s permission on the %s of the stored message %s (%d) reads (it has %s)",
		a.accessKey, x.perm, kind, code, req.Code, owned)}
}
