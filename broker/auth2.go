package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/acl2"
	"github.com/stratamq/stratamq/infra/vfs"
	"github.com/stratamq/stratamq/offsets"
	"github.com/stratamq/stratamq/remoting"
)

// ACL 2.0 (package acl2) in the broker: the users and ACLs are kept in
// config/authMetadata.json and in the bucket checkpoint's authMetadata
// section (restored with the topics on a fresh data dir, adopted by a
// promoted slave), changed by the AUTH_* admin codes (3001-3010), and
// checked on every request when STRATAMQ_AUTHENTICATION_ENABLED or
// STRATAMQ_AUTHORIZATION_ENABLED is on.

const (
	sectionAuth = "authMetadata"
	authFile    = "authMetadata.json"
)

// openAuth loads the users and ACLs of the config dir (none: empty) and
// makes STRATAMQ_INIT_AUTHENTICATION_USER's super user when missing; New
// keeps the store (b.auth) and where it is saved (b.authPath).
func (b *Broker) openAuth(configDir string) (*acl2.Store, string, error) {
	st := acl2.NewStore()
	path := filepath.Join(configDir, authFile)
	raw, err := vfs.ReadFile(b.fs, path) // nil, nil when missing
	switch {
	case err != nil:
		return nil, "", fmt.Errorf("broker: read %s: %w", path, err)
	case len(raw) > 0:
		if err := st.Load(raw); err != nil {
			return nil, "", fmt.Errorf("broker: %s: %w", path, err)
		}
	}
	if u := b.cfg.InitAuthenticationUser; u != nil && u.Username != "" {
		if _, err := st.GetUser(u.Username); err != nil {
			in := acl2.UserInfo{Username: u.Username, Password: u.Password, UserType: "Super"}
			if err := st.CreateUser(in); err != nil {
				return nil, "", fmt.Errorf("broker: STRATAMQ_INIT_AUTHENTICATION_USER: %w", err)
			}
			if err := saveAuthTo(b.fs, st, path); err != nil {
				return nil, "", err
			}
			b.log.Info("ACL 2.0: initial super user made", "user", u.Username)
		}
	}
	return st, path, nil
}

func saveAuthTo(fs vfs.FS, st *acl2.Store, path string) error {
	raw, err := st.Encode()
	if err != nil {
		return err
	}
	return offsets.WriteFileAtomic(fs, path, raw)
}

// saveAuth writes the users and ACLs to the config dir (the checkpoint
// takes them from b.auth at its next run).
func (b *Broker) saveAuth() error { return saveAuthTo(b.fs, b.auth, b.authPath) }

// adoptCheckpointAuth is a promoted slave's: the users and ACLs of the
// bucket checkpoint (its master's last) replace its own.
func (b *Broker) adoptCheckpointAuth(cp *offsets.Checkpoint) error {
	if cp == nil {
		return nil
	}
	raw := cp.Sections[sectionAuth]
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if err := b.auth.Load(raw); err != nil {
		return fmt.Errorf("broker: checkpoint %s: %w", sectionAuth, err)
	}
	return b.saveAuth()
}

// followAuth is a slave's: every STRATAMQ_HA_SYNC_INTERVAL it reads its
// master's bucket checkpoint and takes the users and ACLs there when they
// changed (the master writes them in every checkpoint), until ctx ends.
func (b *Broker) followAuth(ctx context.Context) {
	every := b.cfg.HASyncInterval
	if every <= 0 {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var last []byte
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		cp, err := offsets.ReadCheckpoint(rctx, newCheckpointStore(b.scoped))
		cancel()
		if err != nil || cp == nil {
			continue // none yet, or unreadable: the next tick tries again
		}
		raw := cp.Sections[sectionAuth]
		if len(raw) == 0 || bytes.Equal(raw, last) {
			continue
		}
		if err := b.auth.Load(raw); err != nil {
			b.log.Warn("slave: the master's users and ACLs in its checkpoint do not load; keeping the ones held", "err", err)
			continue
		}
		last = bytes.Clone(raw)
		if err := b.saveAuth(); err != nil {
			b.log.Warn("slave: saving the master's users and ACLs failed", "err", err)
		}
	}
}

// auth2On reports whether ACL 2.0 checks requests.
func (b *Broker) auth2On() bool { return b.cfg.AuthenticationEnabled || b.cfg.AuthorizationEnabled }

// Auth2 is ACL 2.0 for the gRPC endpoint (proxy): the users and ACLs,
// STRATAMQ_AUTHENTICATION_ENABLED, STRATAMQ_AUTHORIZATION_ENABLED, and
// the cluster name (the resource of the cluster's admin actions).
func (b *Broker) Auth2() (store *acl2.Store, authentication, authorization bool, cluster string) {
	return b.auth, b.cfg.AuthenticationEnabled, b.cfg.AuthorizationEnabled, b.cfg.Cluster
}

func lookupPair(pairs []remoting.ExtField, key string) string {
	for i := range pairs {
		if pairs[i].Key == key {
			return pairs[i].Value
		}
	}
	return ""
}

func connIP(c *remoting.Conn) netip.Addr {
	if c == nil || c.RemoteAddr() == nil {
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// auth2Verdict is who signed a request under ACL 2.0.
type auth2Verdict uint8

const (
	signedByUser  auth2Verdict = iota // a user of b.auth: its policies decide
	signedByInner                     // the broker's own credentials: passes
	notAUser                          // no user: ACL 1.0's, if any, decides
)

// auth2Signer checks a request's signature against the user its
// AccessKey names, or the broker's own credentials.
func (b *Broker) auth2Signer(req *remoting.Command, pairs []remoting.ExtField) (string, auth2Verdict, *remoting.Command) {
	ak := lookupPair(pairs, acl.KeyAccessKey)
	pw, isUser := b.auth.Password(ak)
	inner := b.credentials()
	if !isUser && (inner.IsZero() || ak != inner.AccessKey) {
		return ak, notAUser, nil
	}
	if !isUser {
		pw = inner.SecretKey
	}
	sig := lookupPair(pairs, acl.KeySignature)
	if sig == "" || !acl.SignatureOK(pairs, req.Body, pw, sig) {
		return ak, notAUser, remoting.NewResponse(req, remoting.NoPermission,
			fmt.Sprintf("ACL: signature check failed for User:%s (wrong password, or the request was changed)", ak))
	}
	if !isUser {
		return ak, signedByInner, nil
	}
	return ak, signedByUser, nil
}

// checkAuth2 is checkACL with ACL 2.0 on: a request signed by a user is
// authenticated by its password and, with authorization on, decided by
// its policies; the broker's own signed requests pass; any other request
// goes to ACL 1.0 when STRATAMQ_ACL_FILE is set, and is refused when not.
// Every decision on an admin code is logged (audit).
func (b *Broker) checkAuth2(c *remoting.Conn, req *remoting.Command) *remoting.Command {
	code := remoting.RequestCode(req.Code)
	var buf [40]remoting.ExtField
	pairs := req.AppendExtPairs(buf[:0])
	user, who, refused := b.auth2Signer(req, pairs)
	if refused != nil {
		b.audit(code, user, c, refused.Remark)
		return refused
	}
	switch who {
	case signedByInner:
		return nil
	case notAUser:
		if x := b.cfg.ACL; x != nil {
			return x.CheckBroker(c, req)
		}
		if user == "" {
			return remoting.NewResponse(req, remoting.NoPermission,
				fmt.Sprintf("ACL: %s (%d) is not signed; sign it as a user (AccessKey: the username, SecretKey: its password)", code, req.Code))
		}
		resp := remoting.NewResponse(req, remoting.NoPermission, fmt.Sprintf("ACL: User:%s not found", clipName(user)))
		b.audit(code, user, c, resp.Remark)
		return resp
	}
	if d := b.auth.CheckUser(user); d != nil { // disabled
		b.audit(code, user, c, d.Reason)
		return remoting.NewResponse(req, remoting.NoPermission, d.Reason)
	}
	if b.cfg.AuthorizationEnabled {
		ip := connIP(c)
		for _, n := range acl2.Needs(code, pairs, req.Body, b.cfg.Cluster) {
			if d := b.auth.Decide(acl2.Request{Username: user, Resource: n.Resource, Actions: n.Actions, SourceIP: ip}); d != nil {
				b.audit(code, user, c, d.Reason)
				return remoting.NewResponse(req, remoting.NoPermission, d.Reason)
			}
		}
	}
	b.audit(code, user, c, "")
	return nil
}

// checkStored2 is checkStored for a request signed by a user: the stored
// message's topic needs the action perm names.
func (b *Broker) checkStored2(c *remoting.Conn, req *remoting.Command, topic string, perm acl.Perm) (*remoting.Command, bool) {
	var buf [40]remoting.ExtField
	pairs := req.AppendExtPairs(buf[:0])
	user := lookupPair(pairs, acl.KeyAccessKey)
	if _, isUser := b.auth.Password(user); !isUser {
		return nil, false
	}
	if !b.cfg.AuthorizationEnabled {
		return nil, true
	}
	act := acl2.Sub
	if perm == acl.Pub {
		act = acl2.Pub
	}
	res := acl2.Topic(topic)
	if g, ok := strings.CutPrefix(topic, "%RETRY%"); ok && g != "" {
		res, act = acl2.Group(g), acl2.Sub
	}
	if d := b.auth.Decide(acl2.Request{Username: user, Resource: res, Actions: []acl2.Action{act}, SourceIP: connIP(c)}); d != nil {
		return remoting.NewResponse(req, remoting.NoPermission,
			fmt.Sprintf("ACL: User:%s may not %s the topic of the stored message %s reads", clipName(user), act, remoting.RequestCode(req.Code))), true
	}
	return nil, true
}

// audit logs a decision on an admin code (every one), and a refusal of
// any other code at debug level.
func (b *Broker) audit(code remoting.RequestCode, user string, c *remoting.Conn, refusal string) {
	decision := "allow"
	if refusal != "" {
		decision = "deny"
	}
	if acl2.IsAdminCode(code) {
		b.log.Info("audit: admin request", "code", code, "user", clipName(user), "peer", connIP(c), "decision", decision, "reason", refusal)
		return
	}
	if refusal != "" {
		b.log.Debug("audit: request refused", "code", code, "user", clipName(user), "peer", connIP(c), "reason", refusal)
	}
}

func clipName(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// authAnswer is the answer of an AUTH_* change: SUCCESS once saved, or a
// SYSTEM_ERROR with the error's text (as RocketMQ answers a failed change).
func (b *Broker) authAnswer(req *remoting.Command, err error) *remoting.Command {
	if err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	if err := b.saveAuth(); err != nil {
		return errResponse(req, remoting.SystemError, "persist users and ACLs: "+err.Error())
	}
	return remoting.NewResponse(req, remoting.Success, "")
}

func authJSON(req *remoting.Command, v any) *remoting.Command {
	body, err := json.Marshal(v)
	if err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = body
	return resp
}

// authCreateUser handles AUTH_CREATE_USER (3001): header username, body
// a UserInfo. authUpdateUser (3002) is the same and changes the fields
// set.
func (b *Broker) authCreateUser(_ context.Context, _ *remoting.Conn, req *remoting.Command) *remoting.Command {
	var in acl2.UserInfo
	if err := json.Unmarshal(req.Body, &in); err != nil {
		return errResponse(req, remoting.SystemError, "AUTH_CREATE_USER: the body is not a UserInfo: "+err.Error())
	}
	if h := req.ExtFields["username"]; h != "" {
		in.Username = h
	}
	err := b.auth.CreateUser(in)
	if err == nil {
		b.log.Info("ACL 2.0: user created", "user", in.Username, "userType", in.UserType)
	}
	return b.authAnswer(req, err)
}

func (b *Broker) authUpdateUser(_ context.Context, _ *remoting.Conn, req *remoting.Command) *remoting.Command {
	var in acl2.UserInfo
	if err := json.Unmarshal(req.Body, &in); err != nil {
		return errResponse(req, remoting.SystemError, "AUTH_UPDATE_USER: the body is not a UserInfo: "+err.Error())
	}
	if h := req.ExtFields["username"]; h != "" {
		in.Username = h
	}
	err := b.auth.UpdateUser(in)
	if err == nil {
		b.log.Info("ACL 2.0: user updated", "user", in.Username, "passwordChanged", in.Password != "")
	}
	return b.authAnswer(req, err)
}

func (b *Broker) authDeleteUser(_ context.Context, _ *remoting.Conn, req *remoting.Command) *remoting.Command {
	u := req.ExtFields["username"]
	err := b.auth.DeleteUser(u)
	if err == nil {
		b.log.Info("ACL 2.0: user deleted", "user", u)
	}
	return b.authAnswer(req, err)
}

func (b *Broker) authGetUser(_ context.Context, _ *remoting.Conn, req *remoting.Command) *remoting.Command {
	u, err := b.auth.GetUser(req.ExtFields["username"])
	if err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	return authJSON(req, u)
}

func (b *Broker) authListUser(_ context.Context, _ *remoting.Conn, req *remoting.Command) *remoting.Command {
	return authJSON(req, b.auth.ListUsers(req.ExtFields["filter"]))
}

func (b *Broker) aclBody(req *remoting.Command) (acl2.AclInfo, *remoting.Command) {
	var in acl2.AclInfo
	if err := json.Unmarshal(req.Body, &in); err != nil {
		return in, errResponse(req, remoting.SystemError, remoting.RequestCode(req.Code).String()+": the body is not an AclInfo: "+err.Error())
	}
	if h := req.ExtFields["subject"]; h != "" {
		in.Subject = h
	}
	return in, nil
}

// authCreateAcl handles AUTH_CREATE_ACL (3006): header subject, body an
// AclInfo whose entries are merged into the subject's ACL.
func (b *Broker) authCreateAcl(_ context.Context, _ *remoting.Conn, req *remoting.Command) *remoting.Command {
	in, bad := b.aclBody(req)
	if bad != nil {
		return bad
	}
	err := b.auth.CreateAcl(in)
	if err == nil {
		b.log.Info("ACL 2.0: ACL created", "subject", in.Subject)
	}
	return b.authAnswer(req, err)
}

func (b *Broker) authUpdateAcl(_ context.Context, _ *remoting.Conn, req *remoting.Command) *remoting.Command {
	in, bad := b.aclBody(req)
	if bad != nil {
		return bad
	}
	err := b.auth.UpdateAcl(in)
	if err == nil {
		b.log.Info("ACL 2.0: ACL updated", "subject", in.Subject)
	}
	return b.authAnswer(req, err)
}

// authDeleteAcl handles AUTH_DELETE_ACL (3008): header subject, and
// policyType and resource (a comma list) to delete only those entries.
func (b *Broker) authDeleteAcl(_ context.Context, _ *remoting.Conn, req *remoting.Command) *remoting.Command {
	var res []string
	if r := req.ExtFields["resource"]; r != "" {
		res = strings.Split(r, ",")
	}
	err := b.auth.DeleteAcl(req.ExtFields["subject"], req.ExtFields["policyType"], res)
	if err == nil {
		b.log.Info("ACL 2.0: ACL deleted", "subject", req.ExtFields["subject"], "resources", res)
	}
	return b.authAnswer(req, err)
}

func (b *Broker) authGetAcl(_ context.Context, _ *remoting.Conn, req *remoting.Command) *remoting.Command {
	a, err := b.auth.GetAcl(req.ExtFields["subject"])
	if err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	return authJSON(req, a)
}

func (b *Broker) authListAcl(_ context.Context, _ *remoting.Conn, req *remoting.Command) *remoting.Command {
	return authJSON(req, b.auth.ListAcls(req.ExtFields["subjectFilter"], req.ExtFields["resourceFilter"]))
}

// UserSecret is what a name server in this process checks a request
// signed by accessKey against (ACL 2.0): the user's password and whether
// it is a Super user; the broker's own credentials count as one. ok is
// false when accessKey names neither.
func (b *Broker) UserSecret(accessKey string) (secret acl.Secret, super bool, ok bool) {
	if c := b.requestCredentials(); !c.IsZero() && c.AccessKey == accessKey {
		return c.SecretKey, true, true
	}
	if b.auth == nil {
		return "", false, false
	}
	u, err := b.auth.GetUser(accessKey)
	if err != nil {
		return "", false, false
	}
	pw, _ := b.auth.Password(accessKey)
	return pw, u.UserType == acl2.Super.String() && u.UserStatus != acl2.Disabled.String(), true
}
