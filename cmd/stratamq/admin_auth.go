package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/acl2"
	"github.com/stratamq/stratamq/remoting"
)

// ACL 2.0's commands, named and flagged as mqadmin's (RocketMQ 5.3): each
// sends its AUTH_* code (3001-3010) to every master of -b, or of -n (and
// -c); the users and ACLs are the brokers' own, each master keeping its
// copy in its bucket checkpoint.

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// userCommand is createUser and updateUser.
func userCommand(ctx context.Context, e *adminEnv, args []string, code remoting.RequestCode, update bool) error {
	fs := e.flags("n", "b", "c")
	user := fs.String("u", "", "username (required)")
	pw := fs.String("p", "", "password (the user's secret key)")
	typ := fs.String("t", "", "userType: Super or Normal (default Normal)")
	var status *string
	if update {
		status = fs.String("s", "", "userStatus: enable or disable")
	}
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *user == "" || !update && *pw == "" {
		return fmt.Errorf("%w: -u username and -p password are required", errAdminUsage)
	}
	in := acl2.UserInfo{Username: *user, Password: *pw, UserType: *typ}
	if status != nil {
		in.UserStatus = *status
	}
	if _, err := acl2.ParseUserType(in.UserType); err != nil {
		return fmt.Errorf("%w: -t: %v", errAdminUsage, err)
	}
	if _, err := acl2.ParseUserStatus(in.UserStatus); err != nil {
		return fmt.Errorf("%w: -s: %v", errAdminUsage, err)
	}
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	verb := "create"
	if update {
		verb = "update"
	}
	return e.eachMaster(ctx, func() *remoting.Command {
		return remoting.NewRequest(code, map[string]string{"username": *user}, body)
	}, func(addr string) string { return fmt.Sprintf("%s user to %s success.", verb, addr) })
}

func adminCreateUser(ctx context.Context, e *adminEnv, args []string) error {
	return userCommand(ctx, e, args, remoting.AuthCreateUser, false)
}

func adminUpdateUser(ctx context.Context, e *adminEnv, args []string) error {
	return userCommand(ctx, e, args, remoting.AuthUpdateUser, true)
}

func adminDeleteUser(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n", "b", "c")
	user := fs.String("u", "", "username (required)")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *user == "" {
		return fmt.Errorf("%w: -u username is required", errAdminUsage)
	}
	return e.eachMaster(ctx, func() *remoting.Command {
		return remoting.NewRequest(remoting.AuthDeleteUser, map[string]string{"username": *user}, nil)
	}, func(addr string) string { return "delete user from " + addr + " success." })
}

// showEach sends req to every master and prints each answer's body: as
// JSON with --json, else through text.
func (e *adminEnv) showEach(ctx context.Context, mk func() *remoting.Command, asJSON bool, text func(addr string, body []byte) error) error {
	addrs, err := e.masters(ctx)
	if err != nil {
		return err
	}
	for _, addr := range addrs {
		resp, err := e.invoke(ctx, addr, mk())
		if err != nil {
			return err
		}
		if asJSON {
			fmt.Fprintf(e.stdout, "%s\n", resp.Body)
			continue
		}
		if err := text(addr, resp.Body); err != nil {
			return err
		}
	}
	return nil
}

func (e *adminEnv) printUsers(addr string, us []acl2.UserInfo) {
	fmt.Fprintf(e.stdout, "#Broker %s\n%-32s %-8s %s\n", addr, "#UserName", "#Type", "#Status")
	for _, u := range us {
		fmt.Fprintf(e.stdout, "%-32s %-8s %s\n", u.Username, u.UserType, u.UserStatus)
	}
}

func adminGetUser(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n", "b", "c")
	user := fs.String("u", "", "username (required)")
	asJSON := fs.Bool("json", false, "print each broker's answer as JSON")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *user == "" {
		return fmt.Errorf("%w: -u username is required", errAdminUsage)
	}
	return e.showEach(ctx, func() *remoting.Command {
		return remoting.NewRequest(remoting.AuthGetUser, map[string]string{"username": *user}, nil)
	}, *asJSON, func(addr string, body []byte) error {
		var u acl2.UserInfo
		if err := json.Unmarshal(body, &u); err != nil {
			return fmt.Errorf("AUTH_GET_USER from %s: %w", addr, err)
		}
		e.printUsers(addr, []acl2.UserInfo{u})
		return nil
	})
}

func adminListUser(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n", "b", "c")
	filter := fs.String("f", "", "only usernames holding this text")
	asJSON := fs.Bool("json", false, "print each broker's answer as JSON")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	return e.showEach(ctx, func() *remoting.Command {
		return remoting.NewRequest(remoting.AuthListUser, map[string]string{"filter": *filter}, nil)
	}, *asJSON, func(addr string, body []byte) error {
		var us []acl2.UserInfo
		if err := json.Unmarshal(body, &us); err != nil {
			return fmt.Errorf("AUTH_LIST_USER from %s: %w", addr, err)
		}
		e.printUsers(addr, us)
		return nil
	})
}

// aclCommand is createAcl and updateAcl: one entry per resource of -r,
// each with -a's actions, -i's source addresses and -d's decision.
func aclCommand(ctx context.Context, e *adminEnv, args []string, code remoting.RequestCode) error {
	fs := e.flags("n", "b", "c")
	subject := fs.String("s", "", "subject, User:name (required)")
	resources := fs.String("r", "", "resources, comma separated: *, Topic:name, Topic:prefix*, Topic:*, Group:..., Cluster:..., Namespace:... (required)")
	actions := fs.String("a", "", "actions, comma separated: Pub, Sub, Create, Update, Delete, Get, List, All (required)")
	ips := fs.String("i", "", "source addresses or CIDR blocks, comma separated (default any)")
	decision := fs.String("d", "", "Allow or Deny (required)")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *subject == "" || *resources == "" || *actions == "" || *decision == "" {
		return fmt.Errorf("%w: -s subject, -r resources, -a actions and -d decision are required", errAdminUsage)
	}
	info := acl2.AclInfo{Subject: *subject, Policies: []acl2.PolicyInfo{{PolicyType: "Custom"}}}
	for _, r := range splitList(*resources) {
		info.Policies[0].Entries = append(info.Policies[0].Entries, acl2.PolicyEntryInfo{Resource: r,
			Actions: splitList(*actions), SourceIPs: splitList(*ips), Decision: *decision})
	}
	if err := acl2.ValidateAcl(info); err != nil { // a usage error before any broker is asked
		return fmt.Errorf("%w: %v", errAdminUsage, err)
	}
	body, err := json.Marshal(info)
	if err != nil {
		return err
	}
	verb := "create"
	if code == remoting.AuthUpdateAcl {
		verb = "update"
	}
	return e.eachMaster(ctx, func() *remoting.Command {
		return remoting.NewRequest(code, map[string]string{"subject": *subject}, body)
	}, func(addr string) string { return fmt.Sprintf("%s acl to %s success.", verb, addr) })
}

func adminCreateAcl(ctx context.Context, e *adminEnv, args []string) error {
	return aclCommand(ctx, e, args, remoting.AuthCreateAcl)
}

func adminUpdateAcl(ctx context.Context, e *adminEnv, args []string) error {
	return aclCommand(ctx, e, args, remoting.AuthUpdateAcl)
}

func adminDeleteAcl(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n", "b", "c")
	subject := fs.String("s", "", "subject, User:name (required)")
	resources := fs.String("r", "", "resources whose entries go, comma separated (default: the whole ACL)")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *subject == "" {
		return fmt.Errorf("%w: -s subject is required", errAdminUsage)
	}
	return e.eachMaster(ctx, func() *remoting.Command {
		return remoting.NewRequest(remoting.AuthDeleteAcl, map[string]string{"subject": *subject, "resource": strings.Join(splitList(*resources), ",")}, nil)
	}, func(addr string) string { return "delete acl from " + addr + " success." })
}

func (e *adminEnv) printAcls(addr string, as []acl2.AclInfo) {
	fmt.Fprintf(e.stdout, "#Broker %s\n%-24s %-10s %-28s %-24s %-20s %s\n", addr, "#Subject", "#Policy", "#Resource", "#Actions", "#SourceIps", "#Decision")
	for _, a := range as {
		for _, p := range a.Policies {
			for _, x := range p.Entries {
				ips := strings.Join(x.SourceIPs, ",")
				if ips == "" {
					ips = "*"
				}
				fmt.Fprintf(e.stdout, "%-24s %-10s %-28s %-24s %-20s %s\n", a.Subject, p.PolicyType, x.Resource, strings.Join(x.Actions, ","), ips, x.Decision)
			}
		}
	}
}

func adminGetAcl(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n", "b", "c")
	subject := fs.String("s", "", "subject, User:name (required)")
	asJSON := fs.Bool("json", false, "print each broker's answer as JSON")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *subject == "" {
		return fmt.Errorf("%w: -s subject is required", errAdminUsage)
	}
	return e.showEach(ctx, func() *remoting.Command {
		return remoting.NewRequest(remoting.AuthGetAcl, map[string]string{"subject": *subject}, nil)
	}, *asJSON, func(addr string, body []byte) error {
		var a acl2.AclInfo
		if err := json.Unmarshal(body, &a); err != nil {
			return fmt.Errorf("AUTH_GET_ACL from %s: %w", addr, err)
		}
		e.printAcls(addr, []acl2.AclInfo{a})
		return nil
	})
}

func adminListAcl(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n", "b", "c")
	subject := fs.String("s", "", "only subjects holding this text")
	resource := fs.String("r", "", "only ACLs with a resource holding this text")
	asJSON := fs.Bool("json", false, "print each broker's answer as JSON")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	return e.showEach(ctx, func() *remoting.Command {
		return remoting.NewRequest(remoting.AuthListAcl, map[string]string{"subjectFilter": *subject, "resourceFilter": *resource}, nil)
	}, *asJSON, func(addr string, body []byte) error {
		var as []acl2.AclInfo
		if err := json.Unmarshal(body, &as); err != nil {
			return fmt.Errorf("AUTH_LIST_ACL from %s: %w", addr, err)
		}
		e.printAcls(addr, as)
		return nil
	})
}

// adminMigrateAcl is mqadmin's migrateAcl: the accounts of an ACL 1.0
// plain_acl.yml (-f) as ACL 2.0 users and ACLs (acl2.Migrate), created on
// every master of -b or -n; a user that exists is updated (password and
// type). Warnings go to stderr before anything is sent.
func adminMigrateAcl(ctx context.Context, e *adminEnv, args []string) error {
	fs := e.flags("n", "b", "c")
	file := fs.String("f", "", "the ACL 1.0 file, plain_acl.yml (required)")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *file == "" {
		return fmt.Errorf("%w: -f plain_acl.yml is required", errAdminUsage)
	}
	rules, err := acl.Load(*file)
	if err != nil {
		return err
	}
	users, acls, warnings := acl2.Migrate(rules)
	for _, w := range warnings {
		fmt.Fprintln(e.stderr, "warning:", w)
	}
	addrs, err := e.masters(ctx)
	if err != nil {
		return err
	}
	for _, addr := range addrs {
		for _, u := range users {
			body, err := json.Marshal(u)
			if err != nil {
				return err
			}
			hdr := map[string]string{"username": u.Username}
			if _, err := e.invoke(ctx, addr, remoting.NewRequest(remoting.AuthCreateUser, hdr, body)); err != nil {
				if !strings.Contains(err.Error(), acl2.ErrExists.Error()) {
					return fmt.Errorf("user %s: %w", u.Username, err)
				}
				if _, err := e.invoke(ctx, addr, remoting.NewRequest(remoting.AuthUpdateUser, hdr, body)); err != nil {
					return fmt.Errorf("user %s: %w", u.Username, err)
				}
			}
		}
		for _, a := range acls {
			body, err := json.Marshal(a)
			if err != nil {
				return err
			}
			if _, err := e.invoke(ctx, addr, remoting.NewRequest(remoting.AuthCreateAcl, map[string]string{"subject": a.Subject}, body)); err != nil {
				return fmt.Errorf("acl of %s: %w", a.Subject, err)
			}
		}
		fmt.Fprintf(e.stdout, "migrate acl to %s success: %d users, %d acls.\n", addr, len(users), len(acls))
	}
	return nil
}
