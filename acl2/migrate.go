package acl2

import (
	"fmt"
	"slices"

	"github.com/stratamq/stratamq/acl"
)

// Migrate turns the accounts of an ACL 1.0 plain_acl.yml into ACL 2.0
// users and ACLs that decide signed requests as the file did (mqadmin's
// migrateAcl): an account becomes a user (username its accessKey,
// password its secretKey; an admin account a Super user), its topicPerms
// and groupPerms Custom entries on those topics and groups, its default
// perms Default entries on Topic:* and Group:*. A perm that grants one of
// PUB and SUB denies the other on that resource in ACL 1.0, while an ACL
// 2.0 request whose action no Custom entry names falls through to the
// Default policy: so the other action gets a Default entry on the same
// resource that denies it. What ACL 2.0 cannot say comes back as a
// warning: white-listed addresses (ACL 1.0 accepted their requests
// unsigned and unchecked; ACL 2.0 users always sign) and an admin
// account's resource perms (a Super user is not checked per resource).
func Migrate(r *acl.Rules) (users []UserInfo, acls []AclInfo, warnings []string) {
	for _, s := range r.GlobalWhite() {
		warnings = append(warnings, fmt.Sprintf("globalWhiteRemoteAddresses %q: ACL 1.0 accepted every request from there unsigned; "+
			"ACL 2.0 has no such list (its clients sign as users; a policy entry's sourceIps narrows, never widens)", s))
	}
	for _, a := range r.AccountViews() {
		u := UserInfo{Username: a.AccessKey, Password: string(a.SecretKey), UserType: Normal.String(), UserStatus: Enabled.String()}
		if a.White != "" {
			warnings = append(warnings, fmt.Sprintf("account %s: whiteRemoteAddress %q: ACL 1.0 accepted its requests from there unsigned and unchecked; "+
				"as an ACL 2.0 user it signs, and its policies decide", a.AccessKey, a.White))
		}
		if a.Admin {
			u.UserType = Super.String()
			users = append(users, u)
			if a.HasPerms {
				warnings = append(warnings, fmt.Sprintf("account %s: an admin with topicPerms or groupPerms: migrated as a Super user, "+
					"which no policy checks (make it a Normal user with Cluster and resource entries to keep them)", a.AccessKey))
			}
			continue
		}
		users = append(users, u)
		custom := PolicyInfo{PolicyType: Custom.String()}
		def := PolicyInfo{PolicyType: Default.String(), Entries: []PolicyEntryInfo{
			permEntry("Topic:*", a.DefaultTopicPerm), permEntry("Group:*", a.DefaultGroupPerm)}}
		add := func(res string, p acl.Perm) {
			custom.Entries = append(custom.Entries, permEntry(res, p))
			if other, ok := deniedOther(p); ok {
				def.Entries = append(def.Entries, PolicyEntryInfo{Resource: res, Actions: []string{other.String()}, Decision: Deny.String()})
			}
		}
		for _, t := range sortedKeys(a.Topics) {
			add("Topic:"+t, a.Topics[t])
		}
		for _, g := range sortedKeys(a.Groups) {
			add("Group:"+g, a.Groups[g])
		}
		info := AclInfo{Subject: SubjectOf(a.AccessKey), Policies: []PolicyInfo{def}}
		if len(custom.Entries) > 0 {
			info.Policies = append([]PolicyInfo{custom}, info.Policies...)
		}
		acls = append(acls, info)
	}
	return users, acls, warnings
}

// permEntry is the entry on res that grants what ACL 1.0's p grants.
func permEntry(res string, p acl.Perm) PolicyEntryInfo {
	var actions []string
	if p&acl.Deny == 0 {
		if p&acl.Pub != 0 {
			actions = append(actions, Pub.String())
		}
		if p&acl.Sub != 0 {
			actions = append(actions, Sub.String())
		}
	}
	if len(actions) == 0 {
		return PolicyEntryInfo{Resource: res, Actions: []string{ActionAll.String()}, Decision: Deny.String()}
	}
	return PolicyEntryInfo{Resource: res, Actions: actions, Decision: Allow.String()}
}

// deniedOther is the action of PUB and SUB that p, granting the other
// only, denies.
func deniedOther(p acl.Perm) (Action, bool) {
	if p&acl.Deny != 0 {
		return 0, false
	}
	switch p & (acl.Pub | acl.Sub) {
	case acl.Pub:
		return Sub, true
	case acl.Sub:
		return Pub, true
	}
	return 0, false
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
