package acl2

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/stratamq/stratamq/acl"
)

// UserInfo is a user as RocketMQ's admin codes carry it (a request body,
// a GET answer: the password left out of answers).
type UserInfo struct {
	Username   string `json:"username"`
	Password   string `json:"password,omitempty"`
	UserType   string `json:"userType,omitempty"`
	UserStatus string `json:"userStatus,omitempty"`
}

// PolicyEntryInfo, PolicyInfo and AclInfo are an ACL as RocketMQ's admin
// codes carry it.
type PolicyEntryInfo struct {
	Resource  string   `json:"resource"`
	Actions   []string `json:"actions"`
	SourceIPs []string `json:"sourceIps,omitempty"`
	Decision  string   `json:"decision"`
}

type PolicyInfo struct {
	PolicyType string            `json:"policyType,omitempty"`
	Entries    []PolicyEntryInfo `json:"entries"`
}

type AclInfo struct {
	Subject  string       `json:"subject"`
	Policies []PolicyInfo `json:"policies"`
}

// Store holds the users and ACLs of a broker. It is safe for concurrent
// use; Decide reads a snapshot without locking.
type Store struct {
	mu   sync.Mutex // guards writes; readers load snap
	snap atomic.Pointer[state]
}

type state struct {
	users map[string]*User
	acls  map[string]*Acl // by username
}

// NewStore returns an empty store.
func NewStore() *Store {
	s := &Store{}
	s.snap.Store(&state{users: map[string]*User{}, acls: map[string]*Acl{}})
	return s
}

// Errors of the admin operations, for their answers.
var (
	ErrExists   = errors.New("already exists")
	ErrNotFound = errors.New("not found")
)

// Decide answers one request: nil when allowed.
func (s *Store) Decide(q Request) *Denial {
	st := s.snap.Load()
	return decide(st.users[q.Username], st.acls[q.Username], q)
}

// Password is username's secret for checking its signature (false: no
// such user).
func (s *Store) Password(username string) (acl.Secret, bool) {
	u := s.snap.Load().users[username]
	if u == nil {
		return "", false
	}
	return u.Password, true
}

// Len is the number of users and ACLs.
func (s *Store) Len() (users, acls int) {
	st := s.snap.Load()
	return len(st.users), len(st.acls)
}

// update applies f to a copy of the state and publishes it unless f fails.
func (s *Store) update(f func(st *state) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.snap.Load()
	st := &state{users: make(map[string]*User, len(old.users)+1), acls: make(map[string]*Acl, len(old.acls)+1)}
	for k, v := range old.users {
		st.users[k] = v
	}
	for k, v := range old.acls {
		st.acls[k] = v
	}
	if err := f(st); err != nil {
		return err
	}
	s.snap.Store(st)
	return nil
}

func userOf(in UserInfo) (*User, error) {
	if strings.TrimSpace(in.Username) == "" || strings.ContainsAny(in.Username, " :") {
		return nil, fmt.Errorf("username %q: empty, or holds a space or ':'", clip(in.Username))
	}
	t, err := ParseUserType(in.UserType)
	if err != nil {
		return nil, err
	}
	st, err := ParseUserStatus(in.UserStatus)
	if err != nil {
		return nil, err
	}
	return &User{Username: in.Username, Password: acl.Secret(in.Password), Type: t, Status: st}, nil
}

// CreateUser adds a user; its password must be set.
func (s *Store) CreateUser(in UserInfo) error {
	u, err := userOf(in)
	if err != nil {
		return err
	}
	if in.Password == "" {
		return fmt.Errorf("User:%s: a password is needed", u.Username)
	}
	return s.update(func(st *state) error {
		if st.users[u.Username] != nil {
			return fmt.Errorf("User:%s %w", u.Username, ErrExists)
		}
		st.users[u.Username] = u
		return nil
	})
}

// UpdateUser changes the fields of in that are set.
func (s *Store) UpdateUser(in UserInfo) error {
	if _, err := userOf(UserInfo{Username: in.Username, UserType: in.UserType, UserStatus: in.UserStatus}); err != nil {
		return err
	}
	return s.update(func(st *state) error {
		old := st.users[in.Username]
		if old == nil {
			return fmt.Errorf("User:%s %w", clip(in.Username), ErrNotFound)
		}
		u := *old
		if in.Password != "" {
			u.Password = acl.Secret(in.Password)
		}
		if in.UserType != "" {
			u.Type, _ = ParseUserType(in.UserType)
		}
		if in.UserStatus != "" {
			u.Status, _ = ParseUserStatus(in.UserStatus)
		}
		st.users[u.Username] = &u
		return nil
	})
}

// DeleteUser removes a user and its ACL.
func (s *Store) DeleteUser(username string) error {
	return s.update(func(st *state) error {
		if st.users[username] == nil {
			return fmt.Errorf("User:%s %w", clip(username), ErrNotFound)
		}
		delete(st.users, username)
		delete(st.acls, username)
		return nil
	})
}

func infoOf(u *User) UserInfo {
	return UserInfo{Username: u.Username, UserType: u.Type.String(), UserStatus: u.Status.String()}
}

// GetUser is a user without its password.
func (s *Store) GetUser(username string) (UserInfo, error) {
	u := s.snap.Load().users[username]
	if u == nil {
		return UserInfo{}, fmt.Errorf("User:%s %w", clip(username), ErrNotFound)
	}
	return infoOf(u), nil
}

// ListUsers is the users whose name holds filter, by name, without their
// passwords.
func (s *Store) ListUsers(filter string) []UserInfo {
	st := s.snap.Load()
	out := []UserInfo{}
	for name, u := range st.users {
		if strings.Contains(name, filter) {
			out = append(out, infoOf(u))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Username < out[j].Username })
	return out
}

// aclOf parses an AclInfo.
func aclOf(in AclInfo) (*Acl, string, error) {
	name, err := ParseSubject(in.Subject)
	if err != nil {
		return nil, "", err
	}
	a := &Acl{Subject: SubjectOf(name)}
	for _, p := range in.Policies {
		pt, err := ParsePolicyType(p.PolicyType)
		if err != nil {
			return nil, "", err
		}
		pol := Policy{Type: pt}
		for _, e := range p.Entries {
			r, err := ParseResource(e.Resource)
			if err != nil {
				return nil, "", err
			}
			d, err := ParseDecision(e.Decision)
			if err != nil {
				return nil, "", err
			}
			if len(e.Actions) == 0 {
				return nil, "", fmt.Errorf("resource %s: no actions", r)
			}
			ent := Entry{Resource: r, Decision: d}
			for _, s := range e.Actions {
				x, err := ParseAction(s)
				if err != nil {
					return nil, "", err
				}
				ent.Actions = append(ent.Actions, x)
			}
			for _, s := range e.SourceIPs {
				if strings.TrimSpace(s) == "" {
					continue
				}
				p, err := ParseSourceIP(s)
				if err != nil {
					return nil, "", err
				}
				ent.SourceIPs = append(ent.SourceIPs, p)
			}
			pol.Entries = append(pol.Entries, ent)
		}
		a.Policies = append(a.Policies, pol)
	}
	return a, name, nil
}

// merge puts b's entries into a (a copy): an entry of the same policy
// type and resource is replaced, others are added.
func merge(a, b *Acl) *Acl {
	out := &Acl{Subject: b.Subject}
	if a != nil {
		for _, p := range a.Policies {
			out.Policies = append(out.Policies, Policy{Type: p.Type, Entries: append([]Entry(nil), p.Entries...)})
		}
	}
	for _, bp := range b.Policies {
		var dst *Policy
		for i := range out.Policies {
			if out.Policies[i].Type == bp.Type {
				dst = &out.Policies[i]
			}
		}
		if dst == nil {
			out.Policies = append(out.Policies, Policy{Type: bp.Type})
			dst = &out.Policies[len(out.Policies)-1]
		}
		for _, e := range bp.Entries {
			replaced := false
			for i := range dst.Entries {
				if dst.Entries[i].Resource == e.Resource {
					dst.Entries[i], replaced = e, true
				}
			}
			if !replaced {
				dst.Entries = append(dst.Entries, e)
			}
		}
	}
	return out
}

// CreateAcl adds in's entries to its subject's ACL (RocketMQ's
// createAcl and updateAcl both merge: an entry on the same resource is
// replaced). The user must exist.
func (s *Store) CreateAcl(in AclInfo) error {
	a, name, err := aclOf(in)
	if err != nil {
		return err
	}
	return s.update(func(st *state) error {
		if st.users[name] == nil {
			return fmt.Errorf("User:%s %w", clip(name), ErrNotFound)
		}
		st.acls[name] = merge(st.acls[name], a)
		return nil
	})
}

// UpdateAcl is CreateAcl for a subject that must have an ACL already.
func (s *Store) UpdateAcl(in AclInfo) error {
	a, name, err := aclOf(in)
	if err != nil {
		return err
	}
	return s.update(func(st *state) error {
		if st.users[name] == nil {
			return fmt.Errorf("User:%s %w", clip(name), ErrNotFound)
		}
		if st.acls[name] == nil {
			return fmt.Errorf("the ACL of User:%s %w", clip(name), ErrNotFound)
		}
		st.acls[name] = merge(st.acls[name], a)
		return nil
	})
}

// DeleteAcl removes subject's entries on resources (of policyType, ""
// Custom), or its whole ACL when resources is empty.
func (s *Store) DeleteAcl(subject, policyType string, resources []string) error {
	name, err := ParseSubject(subject)
	if err != nil {
		return err
	}
	pt, err := ParsePolicyType(policyType)
	if err != nil {
		return err
	}
	var rs []Resource
	for _, k := range resources {
		if strings.TrimSpace(k) == "" {
			continue
		}
		r, err := ParseResource(k)
		if err != nil {
			return err
		}
		rs = append(rs, r)
	}
	return s.update(func(st *state) error {
		old := st.acls[name]
		if old == nil {
			return fmt.Errorf("the ACL of User:%s %w", clip(name), ErrNotFound)
		}
		if len(rs) == 0 {
			delete(st.acls, name)
			return nil
		}
		out := &Acl{Subject: old.Subject}
		for _, p := range old.Policies {
			np := Policy{Type: p.Type}
			for _, e := range p.Entries {
				drop := false
				for _, r := range rs {
					drop = drop || p.Type == pt && e.Resource == r
				}
				if !drop {
					np.Entries = append(np.Entries, e)
				}
			}
			if len(np.Entries) > 0 {
				out.Policies = append(out.Policies, np)
			}
		}
		if len(out.Policies) == 0 {
			delete(st.acls, name)
		} else {
			st.acls[name] = out
		}
		return nil
	})
}

// InfoOf is an ACL as the admin codes carry it.
func InfoOf(a *Acl) AclInfo {
	out := AclInfo{Subject: a.Subject, Policies: []PolicyInfo{}}
	for _, p := range a.Policies {
		pi := PolicyInfo{PolicyType: p.Type.String(), Entries: []PolicyEntryInfo{}}
		for _, e := range p.Entries {
			ei := PolicyEntryInfo{Resource: e.Resource.String(), Decision: e.Decision.String()}
			for _, x := range e.Actions {
				ei.Actions = append(ei.Actions, x.String())
			}
			for _, ip := range e.SourceIPs {
				if ip.IsSingleIP() {
					ei.SourceIPs = append(ei.SourceIPs, ip.Addr().String())
				} else {
					ei.SourceIPs = append(ei.SourceIPs, ip.String())
				}
			}
			pi.Entries = append(pi.Entries, ei)
		}
		out.Policies = append(out.Policies, pi)
	}
	return out
}

// GetAcl is subject's ACL.
func (s *Store) GetAcl(subject string) (AclInfo, error) {
	name, err := ParseSubject(subject)
	if err != nil {
		return AclInfo{}, err
	}
	a := s.snap.Load().acls[name]
	if a == nil {
		return AclInfo{}, fmt.Errorf("the ACL of User:%s %w", clip(name), ErrNotFound)
	}
	return InfoOf(a), nil
}

// ListAcls is the ACLs whose subject holds subjectFilter and that have an
// entry whose resource key holds resourceFilter ("" matches all), by
// subject.
func (s *Store) ListAcls(subjectFilter, resourceFilter string) []AclInfo {
	st := s.snap.Load()
	out := []AclInfo{}
	for _, a := range st.acls {
		if !strings.Contains(a.Subject, subjectFilter) {
			continue
		}
		info := InfoOf(a)
		if resourceFilter != "" {
			hit := false
			for _, p := range info.Policies {
				for _, e := range p.Entries {
					hit = hit || strings.Contains(e.Resource, resourceFilter)
				}
			}
			if !hit {
				continue
			}
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Subject < out[j].Subject })
	return out
}

// section is the store as the broker's checkpoint keeps it: users with
// their passwords (the bucket is the system of record, as RocketMQ's
// local metadata store holds them) and ACLs.
type section struct {
	Users []UserInfo `json:"users"`
	Acls  []AclInfo  `json:"acls"`
}

// Encode is the store's checkpoint section.
func (s *Store) Encode() ([]byte, error) {
	st := s.snap.Load()
	var sec section
	sec.Users = []UserInfo{}
	for _, u := range st.users {
		in := infoOf(u)
		in.Password = string(u.Password)
		sec.Users = append(sec.Users, in)
	}
	sort.Slice(sec.Users, func(i, j int) bool { return sec.Users[i].Username < sec.Users[j].Username })
	sec.Acls = s.ListAcls("", "")
	return json.Marshal(sec)
}

// Load replaces the store's contents with a section Encode wrote.
func (s *Store) Load(data []byte) error {
	var sec section
	if err := json.Unmarshal(data, &sec); err != nil {
		return fmt.Errorf("acl2: the users and ACLs section does not parse: %w", err)
	}
	st := &state{users: map[string]*User{}, acls: map[string]*Acl{}}
	for _, in := range sec.Users {
		u, err := userOf(in)
		if err != nil {
			return fmt.Errorf("acl2: the users section: %w", err)
		}
		st.users[u.Username] = u
	}
	for _, in := range sec.Acls {
		a, name, err := aclOf(in)
		if err != nil {
			return fmt.Errorf("acl2: the ACLs section: %w", err)
		}
		st.acls[name] = a
	}
	s.mu.Lock()
	s.snap.Store(st)
	s.mu.Unlock()
	return nil
}

// CheckUser refuses an unknown or a disabled user (authentication's
// part of a decision, for a request that touches no resource).
func (s *Store) CheckUser(username string) *Denial {
	u := s.snap.Load().users[username]
	switch {
	case u == nil:
		return &Denial{Username: username, Reason: fmt.Sprintf("ACL: User:%s not found", clip(username))}
	case u.Status == Disabled:
		return &Denial{Username: username, Reason: fmt.Sprintf("ACL: User:%s is disabled", clip(username))}
	}
	return nil
}

// ValidateAcl reports what CreateAcl would refuse in in's form (its
// subject, resources, actions, addresses and decisions).
func ValidateAcl(in AclInfo) error {
	_, _, err := aclOf(in)
	return err
}
