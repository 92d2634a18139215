package acl2

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/stratamq/stratamq/acl"
)

// UserType is a user's kind: a super user passes every authorization.
type UserType uint8

const (
	Normal UserType = iota
	Super
)

func (t UserType) String() string {
	if t == Super {
		return "Super"
	}
	return "Normal"
}

// ParseUserType reads Super or Normal (any case); "" is Normal.
func ParseUserType(s string) (UserType, error) {
	switch strings.ToLower(s) {
	case "", "normal":
		return Normal, nil
	case "super":
		return Super, nil
	}
	return Normal, fmt.Errorf("userType %q is not Super or Normal", s)
}

// UserStatus is whether a user may sign requests.
type UserStatus uint8

const (
	Enabled UserStatus = iota
	Disabled
)

func (s UserStatus) String() string {
	if s == Disabled {
		return "disable"
	}
	return "enable"
}

// ParseUserStatus reads enable or disable (any case); "" is enable.
func ParseUserStatus(s string) (UserStatus, error) {
	switch strings.ToLower(s) {
	case "", "enable":
		return Enabled, nil
	case "disable":
		return Disabled, nil
	}
	return Enabled, fmt.Errorf("userStatus %q is not enable or disable", s)
}

// User is one ACL 2.0 user: the username is the AccessKey its clients
// sign with, the password their secret key.
type User struct {
	Username string
	Password acl.Secret
	Type     UserType
	Status   UserStatus
}

// ResourceType is what kind of thing a resource is.
type ResourceType uint8

const (
	TypeAny ResourceType = iota
	TypeCluster
	TypeNamespace
	TypeTopic
	TypeGroup
)

var typeNames = [...]string{TypeAny: "Any", TypeCluster: "Cluster", TypeNamespace: "Namespace", TypeTopic: "Topic", TypeGroup: "Group"}

func (t ResourceType) String() string { return typeNames[t] }

// Pattern is how a resource name matches: the name itself, a prefix (a
// name written with a trailing *), or every name (*).
type Pattern uint8

const (
	Literal Pattern = iota
	Prefixed
	AnyName
)

// Resource is a policy's resource, or the one a request touches (always
// Literal, of a concrete type).
type Resource struct {
	Type    ResourceType
	Name    string
	Pattern Pattern
}

// Topic and Group are the literal resources requests touch.
func Topic(name string) Resource   { return Resource{Type: TypeTopic, Name: name} }
func Group(name string) Resource   { return Resource{Type: TypeGroup, Name: name} }
func Cluster(name string) Resource { return Resource{Type: TypeCluster, Name: name} }

// ParseResource reads RocketMQ's resource keys: "*" (anything), or
// Type:name, Type:prefix* or Type:* with Type one of Cluster, Namespace,
// Topic, Group (any case).
func ParseResource(key string) (Resource, error) {
	key = strings.TrimSpace(key)
	if key == "*" {
		return Resource{Type: TypeAny, Pattern: AnyName}, nil
	}
	typ, name, ok := strings.Cut(key, ":")
	if !ok || name == "" {
		return Resource{}, fmt.Errorf("resource %q is not *, or Type:name, Type:prefix* or Type:* (Type: Cluster, Namespace, Topic, Group)", key)
	}
	var r Resource
	found := false
	for t, n := range typeNames {
		if t != int(TypeAny) && strings.EqualFold(n, typ) {
			r.Type, found = ResourceType(t), true
		}
	}
	if !found {
		return Resource{}, fmt.Errorf("resource %q: unknown type %q (Cluster, Namespace, Topic, Group)", key, typ)
	}
	switch {
	case name == "*":
		r.Pattern = AnyName
	case strings.HasSuffix(name, "*"):
		r.Pattern, r.Name = Prefixed, strings.TrimSuffix(name, "*")
		if strings.Contains(r.Name, "*") {
			return Resource{}, fmt.Errorf("resource %q: only a trailing * is allowed", key)
		}
	default:
		if strings.Contains(name, "*") {
			return Resource{}, fmt.Errorf("resource %q: only a trailing * is allowed", key)
		}
		r.Name = name
	}
	return r, nil
}

// String is the resource's key, as ParseResource reads it.
func (r Resource) String() string {
	if r.Type == TypeAny {
		return "*"
	}
	switch r.Pattern {
	case AnyName:
		return r.Type.String() + ":*"
	case Prefixed:
		return r.Type.String() + ":" + r.Name + "*"
	}
	return r.Type.String() + ":" + r.Name
}

// Matches reports whether policy resource r covers the request's
// resource x.
func (r Resource) Matches(x Resource) bool {
	if r.Type == TypeAny {
		return true
	}
	if r.Type != x.Type {
		return false
	}
	switch r.Pattern {
	case AnyName:
		return true
	case Prefixed:
		return strings.HasPrefix(x.Name, r.Name)
	}
	return x.Name == r.Name
}

// Action is what a request does to a resource.
type Action uint8

const (
	ActionAll Action = iota + 1 // in a policy: every action
	ActionAny                   // in a request: any action the entry grants
	Pub
	Sub
	Create
	Update
	Delete
	Get
	List
)

var actionNames = [...]string{ActionAll: "All", ActionAny: "Any", Pub: "Pub", Sub: "Sub", Create: "Create", Update: "Update", Delete: "Delete", Get: "Get", List: "List"}

func (a Action) String() string {
	if int(a) < len(actionNames) && actionNames[a] != "" {
		return actionNames[a]
	}
	return "Unknown"
}

// ParseAction reads an action name (any case).
func ParseAction(s string) (Action, error) {
	for a, n := range actionNames {
		if n != "" && strings.EqualFold(n, strings.TrimSpace(s)) {
			return Action(a), nil
		}
	}
	return 0, fmt.Errorf("action %q is not one of Pub, Sub, Create, Update, Delete, Get, List, All, Any", s)
}

// Decision is what a matching policy entry says.
type Decision uint8

const (
	Allow Decision = iota
	Deny
)

func (d Decision) String() string {
	if d == Deny {
		return "Deny"
	}
	return "Allow"
}

// ParseDecision reads Allow or Deny (any case).
func ParseDecision(s string) (Decision, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "allow":
		return Allow, nil
	case "deny":
		return Deny, nil
	}
	return Allow, fmt.Errorf("decision %q is not Allow or Deny", s)
}

// PolicyType: a user's CUSTOM entries are looked at first; its DEFAULT
// ones only when no CUSTOM entry matches.
type PolicyType uint8

const (
	Custom PolicyType = iota
	Default
)

func (p PolicyType) String() string {
	if p == Default {
		return "Default"
	}
	return "Custom"
}

// ParsePolicyType reads Custom or Default (any case); "" is Custom.
func ParsePolicyType(s string) (PolicyType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "custom":
		return Custom, nil
	case "default":
		return Default, nil
	}
	return Custom, fmt.Errorf("policyType %q is not Custom or Default", s)
}

// Entry is one policy entry: a resource, the actions it is about, the
// source addresses it applies to (none: every address), and its
// decision.
type Entry struct {
	Resource  Resource
	Actions   []Action
	SourceIPs []netip.Prefix
	Decision  Decision
}

// ParseSourceIP reads an address or a CIDR block.
func ParseSourceIP(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("sourceIp %q: %v", s, err)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("sourceIp %q is not an address or a CIDR block", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func (e *Entry) matchAction(want []Action) bool {
	if len(e.Actions) == 0 {
		return false
	}
	for _, w := range want {
		if w == ActionAny {
			return true
		}
		for _, a := range e.Actions {
			if a == w || a == ActionAll {
				return true
			}
		}
	}
	return false
}

func (e *Entry) matchIP(ip netip.Addr) bool {
	if len(e.SourceIPs) == 0 {
		return true
	}
	ip = ip.Unmap()
	for _, p := range e.SourceIPs {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Policy is the entries of one type.
type Policy struct {
	Type    PolicyType
	Entries []Entry
}

// Acl is the policies of one subject (User:name).
type Acl struct {
	Subject  string
	Policies []Policy
}

// SubjectOf is the subject key of a username.
func SubjectOf(username string) string { return "User:" + username }

// ParseSubject reads User:name; a bare name is taken as a user's.
func ParseSubject(s string) (username string, err error) {
	s = strings.TrimSpace(s)
	if t, n, ok := strings.Cut(s, ":"); ok {
		if !strings.EqualFold(t, "User") || n == "" {
			return "", fmt.Errorf("subject %q is not User:name", s)
		}
		return n, nil
	}
	if s == "" {
		return "", fmt.Errorf("empty subject")
	}
	return s, nil
}
