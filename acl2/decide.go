package acl2

import (
	"fmt"
	"net/netip"
	"strings"
)

// Request is one authorization question: may Username do Actions on
// Resource from SourceIP. A request touching several resources asks one
// question per resource.
type Request struct {
	Username string
	Resource Resource
	Actions  []Action
	SourceIP netip.Addr
}

// Denial is a refused request. Its text names the user, the resource, the
// actions and the source address, never a secret.
type Denial struct {
	Username string
	Reason   string
}

func (d *Denial) Error() string { return d.Reason }

func actionsText(as []Action) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

func refuse(q Request, detail string) *Denial {
	ip := "unknown"
	if q.SourceIP.IsValid() {
		ip = q.SourceIP.String()
	}
	return &Denial{Username: q.Username, Reason: fmt.Sprintf("ACL: User:%s has no permission to %s %s from %s: %s",
		clip(q.Username), actionsText(q.Actions), q.Resource, ip, detail)}
}

// clip cuts a client-chosen name short for a message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// decide answers q against the user u (nil: unknown) and its ACL (nil:
// none), as RocketMQ 5.3 does: an unknown or disabled user is refused, a
// super user passes; else the entries that match the resource, an action
// and the source address are gathered from the Custom policy, or, when
// none matches there, from the Default one; the most specific of them
// decides (a literal name over a prefix, a longer prefix over a shorter
// one, a prefix over Type:*, a typed resource over *), and between
// equally specific entries Deny wins. No matching entry: refused.
func decide(u *User, a *Acl, q Request) *Denial {
	if u == nil {
		return &Denial{Username: q.Username, Reason: fmt.Sprintf("ACL: User:%s not found", clip(q.Username))}
	}
	if u.Status == Disabled {
		return &Denial{Username: q.Username, Reason: fmt.Sprintf("ACL: User:%s is disabled", clip(q.Username))}
	}
	if u.Type == Super {
		return nil
	}
	if a == nil {
		return refuse(q, "no matched policies")
	}
	best := matchIn(a, Custom, q)
	if best == nil {
		best = matchIn(a, Default, q)
	}
	if best == nil {
		return refuse(q, "no matched policies")
	}
	if best.Decision == Deny {
		return refuse(q, fmt.Sprintf("the decision of %s is Deny", best.Resource))
	}
	return nil
}

// matchIn is the entry of a's policy of type t that decides q: nil when
// none matches.
func matchIn(a *Acl, t PolicyType, q Request) *Entry {
	var best *Entry
	for i := range a.Policies {
		p := &a.Policies[i]
		if p.Type != t {
			continue
		}
		for j := range p.Entries {
			e := &p.Entries[j]
			if !e.Resource.Matches(q.Resource) || !e.matchAction(q.Actions) || !e.matchIP(q.SourceIP) {
				continue
			}
			if best == nil || before(e, best) {
				best = e
			}
		}
	}
	return best
}

// specificity orders resources: * < Type:* < Type:prefix* (longer is more
// specific) < Type:name.
func specificity(r Resource) (int, int) {
	switch {
	case r.Type == TypeAny:
		return 0, 0
	case r.Pattern == AnyName:
		return 1, 0
	case r.Pattern == Prefixed:
		return 2, len(r.Name)
	}
	return 3, 0
}

// before reports whether e decides over f: more specific, or as specific
// and Deny where f allows.
func before(e, f *Entry) bool {
	ek, el := specificity(e.Resource)
	fk, fl := specificity(f.Resource)
	if ek != fk {
		return ek > fk
	}
	if el != fl {
		return el > fl
	}
	return e.Decision == Deny && f.Decision != Deny
}
