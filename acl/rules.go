package acl

import (
	"crypto/hmac"
	"crypto/sha1"
	"fmt"
	"hash"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// Rules is one parsed plain_acl.yml. It is immutable once parsed; a reload
// makes a new one.
type Rules struct {
	globalWhite []addrSet
	accounts    map[string]*account
	admins      []string // access keys of the admin accounts, in file order
	// Warnings are what the file holds that RocketMQ accepts but that is
	// probably a mistake (an unknown permission word, read as DENY).
	Warnings []string
}

// account is one entry of accounts. Its secret never leaves the package
// except through Credentials, whose SecretKey redacts itself.
type account struct {
	accessKey        string
	secret           Secret
	white            addrSet
	admin            bool
	defaultTopicPerm Perm
	defaultGroupPerm Perm
	topics           map[string]Perm
	groups           map[string]Perm
	// hasPerms: the entry lists topicPerms or groupPerms. An admin
	// account without any may use every topic and group (RocketMQ: an
	// admin with no resource map skips the resource check).
	hasPerms bool
	macs     sync.Pool // of hash.Hash: HMAC-SHA1 keyed with secret
}

func (a *account) mac() hash.Hash {
	if h, ok := a.macs.Get().(hash.Hash); ok {
		h.Reset()
		return h
	}
	return hmac.New(sha1.New, []byte(a.secret))
}

// fileConfig is plain_acl.yml as RocketMQ 4.x writes it.
type fileConfig struct {
	GlobalWhiteRemoteAddresses addrList      `yaml:"globalWhiteRemoteAddresses"`
	Accounts                   []fileAccount `yaml:"accounts"`
}

type fileAccount struct {
	AccessKey          string   `yaml:"accessKey"`
	SecretKey          Secret   `yaml:"secretKey"`
	WhiteRemoteAddress addrList `yaml:"whiteRemoteAddress"`
	Admin              bool     `yaml:"admin"`
	DefaultTopicPerm   string   `yaml:"defaultTopicPerm"`
	DefaultGroupPerm   string   `yaml:"defaultGroupPerm"`
	TopicPerms         []string `yaml:"topicPerms"`
	GroupPerms         []string `yaml:"groupPerms"`
}

// addrList reads an address field written as one string (RocketMQ 4.x's
// whiteRemoteAddress) or as a list of them.
type addrList []string

func (l *addrList) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			*l = nil
			return nil
		}
		*l = addrList{n.Value}
		return nil
	case yaml.SequenceNode:
		var s []string
		if err := n.Decode(&s); err != nil {
			return err
		}
		*l = s
		return nil
	}
	return fmt.Errorf("line %d: want an address or a list of addresses", n.Line)
}

// minKeyLen is the shortest accessKey and secretKey accepted (RocketMQ
// refuses shorter ones too).
const minKeyLen = 6

// Parse reads a plain_acl.yml. Errors name the account by its access key
// (never its secret) and the line when YAML gives one.
func Parse(data []byte) (*Rules, error) {
	var fc fileConfig
	if err := yaml.Unmarshal(data, &fc); err != nil {
		return nil, fmt.Errorf("acl: %w", err)
	}
	r := &Rules{accounts: make(map[string]*account, len(fc.Accounts))}
	for _, s := range fc.GlobalWhiteRemoteAddresses {
		set, err := parseAddrSet(s)
		if err != nil {
			return nil, fmt.Errorf("acl: globalWhiteRemoteAddresses: %w", err)
		}
		if !set.empty() {
			r.globalWhite = append(r.globalWhite, set)
		}
	}
	for i, fa := range fc.Accounts {
		ak := strings.TrimSpace(fa.AccessKey)
		where := fmt.Sprintf("accounts[%d] (accessKey %q)", i, ak)
		switch {
		case len(ak) < minKeyLen:
			return nil, fmt.Errorf("acl: %s: accessKey must be at least %d characters", where, minKeyLen)
		case len(strings.TrimSpace(string(fa.SecretKey))) < minKeyLen:
			return nil, fmt.Errorf("acl: %s: secretKey must be at least %d characters", where, minKeyLen)
		case r.accounts[ak] != nil:
			return nil, fmt.Errorf("acl: %s: accessKey listed twice", where)
		}
		a := &account{accessKey: ak, secret: Secret(strings.TrimSpace(string(fa.SecretKey))), admin: fa.Admin,
			topics: map[string]Perm{}, groups: map[string]Perm{}}
		a.hasPerms = len(fa.TopicPerms) > 0 || len(fa.GroupPerms) > 0
		var err error
		if a.white, err = parseAddrSet(strings.Join(fa.WhiteRemoteAddress, ",")); err != nil {
			return nil, fmt.Errorf("acl: %s: whiteRemoteAddress: %w", where, err)
		}
		a.defaultTopicPerm = r.perm(where+" defaultTopicPerm", fa.DefaultTopicPerm)
		a.defaultGroupPerm = r.perm(where+" defaultGroupPerm", fa.DefaultGroupPerm)
		if err := r.resourcePerms(where+" topicPerms", fa.TopicPerms, a.topics); err != nil {
			return nil, err
		}
		if err := r.resourcePerms(where+" groupPerms", fa.GroupPerms, a.groups); err != nil {
			return nil, err
		}
		r.accounts[ak] = a
		if a.admin {
			r.admins = append(r.admins, ak)
		}
	}
	return r, nil
}

// perm parses one permission word; a missing one is DENY (RocketMQ's
// default), an unknown one is DENY with a warning.
func (r *Rules) perm(where, s string) Perm {
	if strings.TrimSpace(s) == "" {
		return Deny
	}
	p, ok := ParsePerm(s)
	if !ok {
		r.Warnings = append(r.Warnings, fmt.Sprintf("%s: unknown permission %q, read as DENY (want PUB, SUB, PUB|SUB or DENY)", where, s))
	}
	return p
}

// resourcePerms reads "name=PERM" entries. A group's entry governs its
// retry and dead-letter topics too.
func (r *Rules) resourcePerms(where string, entries []string, into map[string]Perm) error {
	for _, e := range entries {
		name, perm, ok := strings.Cut(e, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.Contains(perm, "=") {
			return fmt.Errorf("acl: %s: entry %q: want name=PUB, name=SUB, name=PUB|SUB or name=DENY", where, e)
		}
		into[name] = r.perm(where+" "+name, perm)
	}
	return nil
}

// Load reads and parses the file at path.
func Load(path string) (*Rules, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("acl: read %s: %w", path, err)
	}
	r, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// Accounts is how many accounts the rules hold.
func (r *Rules) Accounts() int { return len(r.accounts) }

// Credentials returns the credentials of the account with accessKey, or,
// when accessKey is empty, of the first admin account in the file; ok is
// false when there is no such account.
func (r *Rules) Credentials(accessKey string) (c Credentials, ok bool) {
	if accessKey == "" {
		if len(r.admins) == 0 {
			return c, false
		}
		accessKey = r.admins[0]
	}
	a := r.accounts[accessKey]
	if a == nil {
		return c, false
	}
	return Credentials{AccessKey: a.accessKey, SecretKey: a.secret}, true
}

// AccountView is one account of a parsed plain_acl.yml as ACL 2.0's
// migration (acl2.Migrate) reads it.
type AccountView struct {
	AccessKey        string
	SecretKey        Secret
	Admin            bool
	HasPerms         bool   // the entry lists topicPerms or groupPerms
	White            string // whiteRemoteAddress as written ("": none)
	DefaultTopicPerm Perm
	DefaultGroupPerm Perm
	Topics, Groups   map[string]Perm // copies
}

// AccountViews lists r's accounts by access key.
func (r *Rules) AccountViews() []AccountView {
	out := make([]AccountView, 0, len(r.accounts))
	for _, a := range r.accounts {
		v := AccountView{AccessKey: a.accessKey, SecretKey: a.secret, Admin: a.admin, HasPerms: a.hasPerms,
			DefaultTopicPerm: a.defaultTopicPerm, DefaultGroupPerm: a.defaultGroupPerm,
			Topics: maps.Clone(a.topics), Groups: maps.Clone(a.groups)}
		if !a.white.empty() {
			v.White = a.white.text
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(x, y AccountView) int { return strings.Compare(x.AccessKey, y.AccessKey) })
	return out
}

// GlobalWhite lists globalWhiteRemoteAddresses as written.
func (r *Rules) GlobalWhite() []string {
	var out []string
	for _, s := range r.globalWhite {
		out = append(out, s.text)
	}
	return out
}
