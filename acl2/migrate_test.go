package acl2

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/remoting"
)

const migrateYAML = `
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: RocketMQadmin
    secretKey: 12345678admin
    admin: true
  - accessKey: producerKey
    secretKey: producerSecret1
    whiteRemoteAddress: 192.168.0.*
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=PUB
      - topicB=SUB
      - topicC=PUB|SUB
      - topicD=DENY
    groupPerms:
      - groupA=SUB
      - groupB=DENY
      - groupC=PUB
  - accessKey: consumerKey
    secretKey: consumerSecret1
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: DENY
    topicPerms:
      - topicX=DENY
      - topicY=SUB
      - topicA=PUB
    groupPerms:
      - groupA=PUB|SUB
  - accessKey: adminWithPerms
    secretKey: adminSecret12
    admin: true
    topicPerms:
      - topicA=DENY
`

// TestMigrateDecidesAsACL1: every account of a plain_acl.yml migrated
// (Migrate, then the users and ACLs made through the store's create
// calls, as the admin codes do) allows and refuses a table of signed
// requests — sends, pulls, offsets, send-backs, retry topics, queries and
// admin codes over specific, default and unlisted topics and groups — as
// ACL 1.0 did, from an address no white list names; what cannot carry
// over is warned about.
func TestMigrateDecidesAsACL1(t *testing.T) {
	rules, err := acl.Parse([]byte(migrateYAML))
	if err != nil {
		t.Fatal(err)
	}
	users, acls, warnings := Migrate(rules)
	s := NewStore()
	for _, u := range users {
		if err := s.CreateUser(u); err != nil {
			t.Fatalf("create user %s: %v", u.Username, err)
		}
	}
	for _, a := range acls {
		if err := ValidateAcl(a); err != nil {
			t.Fatalf("acl of %s: %v", a.Subject, err)
		}
		if err := s.CreateAcl(a); err != nil {
			t.Fatalf("create acl of %s: %v", a.Subject, err)
		}
	}
	for _, want := range []string{"globalWhiteRemoteAddresses", "account producerKey: whiteRemoteAddress", "account adminWithPerms: an admin with topicPerms"} {
		if !strings.Contains(strings.Join(warnings, "\n"), want) {
			t.Errorf("no warning about %q in %q", want, warnings)
		}
	}
	peer := netip.MustParseAddr("172.16.0.9")
	topics := []string{"topicA", "topicB", "topicC", "topicD", "topicX", "topicY", "other", "%RETRY%groupA", "%RETRY%groupB", "%RETRY%groupC"}
	groups := []string{"groupA", "groupB", "groupC", "otherG"}
	type probe struct {
		code   remoting.RequestCode
		fields map[string]string
	}
	var probes []probe
	for _, tp := range topics {
		probes = append(probes,
			probe{remoting.SendMessage, map[string]string{"topic": tp}},
			probe{remoting.GetMaxOffset, map[string]string{"topic": tp}},
			probe{remoting.UpdateAndCreateTopic, map[string]string{"topic": tp}})
		for _, g := range groups {
			probes = append(probes,
				probe{remoting.PullMessage, map[string]string{"topic": tp, "consumerGroup": g}},
				probe{remoting.QueryConsumerOffset, map[string]string{"topic": tp, "consumerGroup": g}},
				probe{remoting.UpdateConsumerOffset, map[string]string{"topic": tp, "consumerGroup": g}})
		}
	}
	for _, g := range groups {
		probes = append(probes, probe{remoting.ConsumerSendMsgBack, map[string]string{"group": g}})
	}
	checked, allowed := 0, 0
	for _, acct := range rules.AccountViews() {
		for _, p := range probes {
			req := remoting.NewRequest(p.code, p.fields, nil)
			acl.Credentials{AccessKey: acct.AccessKey, SecretKey: acct.SecretKey}.Sign(req)
			v1 := rules.Verify(peer, req, true) == nil
			var why string
			v2 := true
			for _, n := range Needs(p.code, req.AppendExtPairs(nil), nil, "DefaultCluster") {
				if d := s.Decide(Request{Username: acct.AccessKey, Resource: n.Resource, Actions: n.Actions, SourceIP: peer}); d != nil {
					v2, why = false, d.Reason
					break
				}
			}
			if acct.AccessKey == "adminWithPerms" && p.code != remoting.UpdateAndCreateTopic {
				// Warned: a Super user is not checked per resource (ACL
				// 1.0 checks an admin's listed and default perms).
				continue
			}
			checked++
			if v2 {
				allowed++
			}
			if v1 != v2 {
				t.Errorf("%s %s %v: ACL 1.0 allows %v, the migrated ACL 2.0 %v (%s)", acct.AccessKey, p.code, p.fields, v1, v2, why)
			}
		}
	}
	t.Logf("%d requests decided alike (%d allowed); warnings:\n%s", checked, allowed, strings.Join(warnings, "\n"))
	if allowed == 0 || allowed == checked {
		t.Fatalf("the table does not tell allow from refuse: %d of %d allowed", allowed, checked)
	}

}
