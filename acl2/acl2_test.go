package acl2

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/stratamq/stratamq/remoting"
)

const secretPw = "s3cr3t-Pa55word"

// testStore has users alice (normal, with the policies below), root
// (super), bob (normal, no ACL) and off (disabled).
func testStore(t *testing.T) *Store {
	t.Helper()
	s := NewStore()
	for _, u := range []UserInfo{
		{Username: "alice", Password: secretPw},
		{Username: "root", Password: secretPw, UserType: "Super"},
		{Username: "bob", Password: secretPw},
		{Username: "off", Password: secretPw, UserType: "Super", UserStatus: "disable"},
	} {
		if err := s.CreateUser(u); err != nil {
			t.Fatal(err)
		}
	}
	entry := func(res, acts, dec string, ips ...string) PolicyEntryInfo {
		return PolicyEntryInfo{Resource: res, Actions: strings.Split(acts, ","), Decision: dec, SourceIPs: ips}
	}
	err := s.CreateAcl(AclInfo{Subject: "User:alice", Policies: []PolicyInfo{{Entries: []PolicyEntryInfo{
		entry("Topic:orders", "Pub,Sub", "Allow"),
		entry("Topic:pay*", "Pub", "Allow"),
		entry("Topic:payroll*", "Pub", "Deny"),
		entry("Topic:mail*", "Pub", "Deny"),
		entry("Topic:mailbox*", "Pub", "Allow"),
		entry("Topic:secret", "Pub", "Allow"),
		entry("Topic:secret", "Pub", "Deny"), // same resource: replaces the Allow above
		entry("Group:g1", "Sub", "Allow"),
		entry("Group:*", "Sub", "Deny"),
		entry("Topic:lan", "Pub", "Allow", "10.1.0.0/16", "192.168.7.7"),
		entry("Topic:all", "All", "Allow"),
		entry("Cluster:c1", "Get", "Allow"),
	}}, {PolicyType: "Default", Entries: []PolicyEntryInfo{
		entry("*", "Sub", "Allow"),
		entry("Topic:*", "Get", "Allow"),
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	// UpdateAcl merges into the ACL.
	err = s.UpdateAcl(AclInfo{Subject: "alice", Policies: []PolicyInfo{{Entries: []PolicyEntryInfo{
		entry("Topic:ab*", "Pub", "Allow"),
		entry("Topic:ab*", "Sub", "Allow"),
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestACL2Decide(t *testing.T) {
	s := testStore(t)
	lo := netip.MustParseAddr("127.0.0.1")
	lan := netip.MustParseAddr("10.1.2.3")
	cases := []struct {
		name, user string
		res        Resource
		acts       []Action
		ip         netip.Addr
		allow      bool
		why        string // in the refusal
	}{
		{"exact allow", "alice", Topic("orders"), []Action{Pub}, lo, true, ""},
		{"exact: another action", "alice", Topic("orders"), []Action{Delete}, lo, false, "no matched policies"},
		{"exact: another name", "alice", Topic("orders2"), []Action{Pub}, lo, false, "no matched policies"},
		{"prefix allow", "alice", Topic("payments"), []Action{Pub}, lo, true, ""},
		{"longer prefix deny wins", "alice", Topic("payroll-eu"), []Action{Pub}, lo, false, "Topic:payroll* is Deny"},
		{"longer prefix allow over shorter deny", "alice", Topic("mailbox-1"), []Action{Pub}, lo, true, ""},
		{"shorter prefix deny", "alice", Topic("mail-2"), []Action{Pub}, lo, false, "Topic:mail* is Deny"},
		{"same resource replaced by Deny", "alice", Topic("secret"), []Action{Pub}, lo, false, "Topic:secret is Deny"},
		{"literal allow over wildcard deny", "alice", Group("g1"), []Action{Sub}, lo, true, ""},
		{"wildcard deny", "alice", Group("g2"), []Action{Sub}, lo, false, "Group:* is Deny"},
		{"custom before default", "alice", Group("g3"), []Action{Sub}, lo, false, "Group:* is Deny"},
		{"default policy when no custom matches", "alice", Topic("news"), []Action{Sub}, lo, true, ""},
		{"default Type:* for Get", "alice", Topic("news"), []Action{Get}, lo, true, ""},
		{"default: nothing for Pub", "alice", Topic("news"), []Action{Pub}, lo, false, "no matched policies"},
		{"ip condition in a block", "alice", Topic("lan"), []Action{Pub}, lan, true, ""},
		{"ip condition exact", "alice", Topic("lan"), []Action{Pub}, netip.MustParseAddr("192.168.7.7"), true, ""},
		{"ip condition outside", "alice", Topic("lan"), []Action{Pub}, lo, false, "from 127.0.0.1"},
		{"ip condition v4-mapped", "alice", Topic("lan"), []Action{Pub}, netip.MustParseAddr("::ffff:10.1.9.9"), true, ""},
		{"All grants every action", "alice", Topic("all"), []Action{Delete}, lo, true, ""},
		{"one of several actions", "alice", Topic("orders"), []Action{Sub, Get}, lo, true, ""},
		{"merged by UpdateAcl", "alice", Topic("abc"), []Action{Sub}, lo, true, ""},
		{"cluster", "alice", Cluster("c1"), []Action{Get}, lo, true, ""},
		{"cluster update", "alice", Cluster("c1"), []Action{Update}, lo, false, "Cluster:c1"},
		{"super passes", "root", Topic("anything"), []Action{Delete}, lo, true, ""},
		{"no ACL", "bob", Topic("orders"), []Action{Pub}, lo, false, "User:bob has no permission to Pub Topic:orders"},
		{"unknown user", "mallory", Topic("orders"), []Action{Pub}, lo, false, "User:mallory not found"},
		{"disabled super", "off", Topic("orders"), []Action{Pub}, lo, false, "User:off is disabled"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := s.Decide(Request{Username: c.user, Resource: c.res, Actions: c.acts, SourceIP: c.ip})
			if c.allow {
				if d != nil {
					t.Fatalf("refused: %s", d.Reason)
				}
				return
			}
			if d == nil {
				t.Fatal("allowed, want refused")
			}
			if !strings.Contains(d.Reason, c.why) {
				t.Fatalf("refusal %q does not say %q", d.Reason, c.why)
			}
			if strings.Contains(d.Reason, secretPw) {
				t.Fatalf("refusal %q holds the password", d.Reason)
			}
			if c.user == "alice" || c.user == "bob" {
				for _, w := range []string{"User:" + c.user, c.res.String(), c.acts[0].String()} {
					if !strings.Contains(d.Reason, w) {
						t.Fatalf("refusal %q does not name %q", d.Reason, w)
					}
				}
			}
		})
	}
}

// Between two entries as specific (the admin codes replace an entry on
// the same resource, but a restored or hand-made ACL may hold both), Deny
// decides, whichever comes first.
func TestACL2DenyOverAllowSameSpecificity(t *testing.T) {
	for _, order := range [][2]Decision{{Allow, Deny}, {Deny, Allow}} {
		a := &Acl{Subject: "User:u", Policies: []Policy{{Type: Custom}}}
		for _, dec := range order {
			a.Policies[0].Entries = append(a.Policies[0].Entries,
				Entry{Resource: Resource{Type: TypeTopic, Name: "t", Pattern: Prefixed}, Actions: []Action{Pub}, Decision: dec})
		}
		u := &User{Username: "u"}
		if d := decide(u, a, Request{Username: "u", Resource: Topic("topic"), Actions: []Action{Pub}}); d == nil {
			t.Fatalf("order %v: allowed; Deny must win a tie", order)
		}
	}
}

func TestACL2ParseResource(t *testing.T) {
	for in, want := range map[string]Resource{
		"*":           {Type: TypeAny, Pattern: AnyName},
		"Topic:t1":    {Type: TypeTopic, Name: "t1"},
		"topic:t1*":   {Type: TypeTopic, Name: "t1", Pattern: Prefixed},
		"GROUP:*":     {Type: TypeGroup, Pattern: AnyName},
		"Cluster:c":   {Type: TypeCluster, Name: "c"},
		"Namespace:n": {Type: TypeNamespace, Name: "n"},
	} {
		got, err := ParseResource(in)
		if err != nil || got != want {
			t.Errorf("ParseResource(%q) = %v, %v; want %v", in, got, err, want)
		}
		if back, _ := ParseResource(got.String()); back != got {
			t.Errorf("%q does not round-trip: %q", in, got.String())
		}
	}
	for _, bad := range []string{"", "Topic", "Topic:", "User:x", "Topic:a*b", "Topic:*a"} {
		if _, err := ParseResource(bad); err == nil {
			t.Errorf("ParseResource(%q): no error", bad)
		}
	}
}

func TestACL2StoreAdmin(t *testing.T) {
	s := testStore(t)
	if err := s.CreateUser(UserInfo{Username: "alice", Password: "x"}); !errors.Is(err, ErrExists) {
		t.Fatalf("second create: %v", err)
	}
	if err := s.CreateUser(UserInfo{Username: "nopw"}); err == nil {
		t.Fatal("a user without a password was created")
	}
	if err := s.UpdateUser(UserInfo{Username: "bob", UserType: "Super"}); err != nil {
		t.Fatal(err)
	}
	if d := s.Decide(Request{Username: "bob", Resource: Topic("x"), Actions: []Action{Pub}}); d != nil {
		t.Fatalf("bob made super: %s", d.Reason)
	}
	if pw, _ := s.Password("bob"); pw != secretPw {
		t.Fatal("an update without a password changed it")
	}
	u, err := s.GetUser("bob")
	if err != nil || u.Password != "" || u.UserType != "Super" {
		t.Fatalf("GetUser = %+v, %v", u, err)
	}
	if got := s.ListUsers("o"); len(got) != 3 || got[0].Username != "bob" {
		t.Fatalf("ListUsers(o) = %+v", got)
	}
	if got := s.ListAcls("", "payroll"); len(got) != 1 || got[0].Subject != "User:alice" {
		t.Fatalf("ListAcls = %+v", got)
	}
	if err := s.DeleteAcl("User:alice", "", []string{"Topic:payroll*"}); err != nil {
		t.Fatal(err)
	}
	if d := s.Decide(Request{Username: "alice", Resource: Topic("payroll-eu"), Actions: []Action{Pub}}); d != nil {
		t.Fatalf("the Deny entry was deleted, Topic:pay* allows: %s", d.Reason)
	}
	if err := s.CreateAcl(AclInfo{Subject: "User:ghost", Policies: []PolicyInfo{{Entries: []PolicyEntryInfo{{Resource: "*", Actions: []string{"All"}, Decision: "Allow"}}}}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ACL of an unknown user: %v", err)
	}
	for _, bad := range []PolicyEntryInfo{
		{Resource: "Topic:t", Actions: []string{"Fly"}, Decision: "Allow"},
		{Resource: "Topic:t", Decision: "Allow"},
		{Resource: "Topic:t", Actions: []string{"Pub"}, Decision: "Maybe"},
		{Resource: "Topic:t", Actions: []string{"Pub"}, Decision: "Allow", SourceIPs: []string{"10.0.0.300"}},
	} {
		if err := s.CreateAcl(AclInfo{Subject: "User:alice", Policies: []PolicyInfo{{Entries: []PolicyEntryInfo{bad}}}}); err == nil {
			t.Errorf("entry %+v accepted", bad)
		}
	}
	// Encode and Load keep everything, passwords included.
	data, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	s2 := NewStore()
	if err := s2.Load(data); err != nil {
		t.Fatal(err)
	}
	if pw, ok := s2.Password("alice"); !ok || pw != secretPw {
		t.Fatal("alice's password lost in Encode/Load")
	}
	a1, _ := s.GetAcl("User:alice")
	a2, _ := s2.GetAcl("alice")
	if len(a1.Policies) != 2 || len(a2.Policies) != 2 || len(a1.Policies[0].Entries) != len(a2.Policies[0].Entries) {
		t.Fatalf("ACL changed in Encode/Load: %+v vs %+v", a1, a2)
	}
	if d := s2.Decide(Request{Username: "alice", Resource: Topic("lan"), Actions: []Action{Pub}, SourceIP: netip.MustParseAddr("10.1.0.1")}); d != nil {
		t.Fatalf("after Load: %s", d.Reason)
	}
	if err := s.DeleteUser("alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetAcl("User:alice"); !errors.Is(err, ErrNotFound) {
		t.Fatal("deleting a user kept its ACL")
	}
}

func TestACL2Needs(t *testing.T) {
	p := func(kv ...string) []remoting.ExtField {
		var out []remoting.ExtField
		for i := 0; i < len(kv); i += 2 {
			out = append(out, remoting.ExtField{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	str := func(ns []Need) string {
		var s []string
		for _, n := range ns {
			s = append(s, n.Resource.String()+"="+actionsText(n.Actions))
		}
		return strings.Join(s, " ")
	}
	cases := []struct {
		code  remoting.RequestCode
		pairs []remoting.ExtField
		body  string
		want  string
	}{
		{remoting.SendMessage, p("topic", "t"), "", "Topic:t=Pub"},
		{remoting.SendMessageV2, p("a", "pg", "b", "t2"), "", "Topic:t2=Pub"},
		{remoting.SendMessageV2, p("a", "g", "b", "%RETRY%g"), "", "Group:g=Sub"},
		{remoting.PullMessage, p("topic", "t", "consumerGroup", "g"), "", "Topic:t=Sub Group:g=Sub"},
		{remoting.PullMessage, p("topic", "%RETRY%g", "consumerGroup", "g"), "", "Group:g=Sub Group:g=Sub"},
		{remoting.PopMessage, p("topic", "t", "consumerGroup", "g"), "", "Topic:t=Sub Group:g=Sub"},
		{remoting.UpdateConsumerOffset, p("topic", "t", "consumerGroup", "g"), "", "Topic:t=Sub,Update Group:g=Sub,Update"},
		{remoting.HeartBeat, nil, `{"consumerDataSet":[{"groupName":"g","subscriptionDataSet":[{"topic":"t"},{"topic":"%RETRY%g"}]}]}`, "Group:g=Sub Topic:t=Sub"},
		{remoting.UpdateAndCreateTopic, p("topic", "t"), "", "Topic:t=Create,Update"},
		{remoting.DeleteTopicInBroker, p("topic", "t"), "", "Topic:t=Delete"},
		{remoting.UpdateAndCreateSubscriptionGroup, nil, `{"groupName":"g"}`, "Group:g=Create,Update"},
		{remoting.AuthCreateUser, p("username", "x"), "", "Cluster:c1=Update"},
		{remoting.AuthListAcl, nil, "", "Cluster:c1=List"},
		{remoting.GetRouteinfoByTopic, p("topic", "t"), "", ""},
	}
	for _, c := range cases {
		if got := str(Needs(c.code, c.pairs, []byte(c.body), "c1")); got != c.want {
			t.Errorf("%s %v: %q, want %q", c.code, c.pairs, got, c.want)
		}
	}
}
