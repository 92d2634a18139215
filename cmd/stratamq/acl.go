package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"

	"github.com/stratamq/stratamq/acl"
	"github.com/stratamq/stratamq/acl2"
	"github.com/stratamq/stratamq/broker"
)

// Environment variables of the ACL that are not settings of Config: a
// secret is never a Config field, so GET_BROKER_CONFIG, -h and the
// startup log cannot show it.
const (
	envACLSecretKey = "STRATAMQ_ACL_SECRET_KEY" // the broker's own secret, without an ACL file
	envAccessKey    = "STRATAMQ_ACCESS_KEY"     // admin and replay: the account they sign with
	envSecretKey    = "STRATAMQ_SECRET_KEY"
	envHASecret     = "STRATAMQ_HA_SECRET" // a master's and its slaves' shared HA secret
	// ACL 2.0's first super user, JSON {"username":...,"password":...}
	// (RocketMQ's initAuthenticationUser).
	envInitAuthUser = "STRATAMQ_INIT_AUTHENTICATION_USER"
)

// initAuthUserFromEnv reads STRATAMQ_INIT_AUTHENTICATION_USER
// (Config.InitAuthenticationUser). The error never quotes the value: it
// holds a password.
func initAuthUserFromEnv(cfg *Config, environ map[string]string) error {
	raw := environ[envInitAuthUser]
	if raw == "" {
		return nil
	}
	var u acl2.UserInfo
	if err := json.Unmarshal([]byte(raw), &u); err != nil || u.Username == "" || u.Password == "" {
		return fmt.Errorf("%s is not {\"username\":...,\"password\":...} with both set", envInitAuthUser)
	}
	cfg.InitAuthenticationUser = &acl2.UserInfo{Username: u.Username, Password: u.Password}
	return nil
}

// haSecretFromEnv sets the HA port's shared secret from
// STRATAMQ_HA_SECRET (Config.HASecret).
func haSecretFromEnv(cfg *Config, environ map[string]string) {
	cfg.HASecret = acl.Secret(environ[envHASecret])
}

// aclCredentialsFromEnv sets the broker's explicit outgoing credentials:
// STRATAMQ_ACL_ACCESS_KEY with STRATAMQ_ACL_SECRET_KEY, for a broker
// without an ACL file of its own whose name servers (or master) check
// signatures. With an ACL file the secret comes from the file instead.
func aclCredentialsFromEnv(cfg *Config, environ map[string]string) error {
	secret := environ[envACLSecretKey]
	if secret == "" {
		return nil
	}
	if cfg.ACLFile != "" {
		return fmt.Errorf("%s is set with STRATAMQ_ACL_FILE: the broker signs with the account STRATAMQ_ACL_ACCESS_KEY names in the file; unset %s", envACLSecretKey, envACLSecretKey)
	}
	if cfg.ACLAccessKey == "" {
		return fmt.Errorf("%s is set without STRATAMQ_ACL_ACCESS_KEY: set the access key of that secret", envACLSecretKey)
	}
	cfg.ACLCredentials = acl.Credentials{AccessKey: cfg.ACLAccessKey, SecretKey: acl.Secret(secret)}
	return nil
}

// openACL opens STRATAMQ_ACL_FILE (nil without one) and starts its
// reloader; stop ends it and waits for it. It checks that
// the broker has an account to sign its own requests with: the one
// STRATAMQ_ACL_ACCESS_KEY names must exist, and a missing admin account
// is a warning (an ACL-protected name server refuses its registration).
func openACL(ctx context.Context, cfg Config, log *slog.Logger, withBroker bool) (x *acl.ACL, stop func(), err error) {
	if cfg.ACLFile == "" {
		return nil, func() {}, nil
	}
	x, err = acl.Open(cfg.ACLFile, acl.Options{Logger: log})
	if err != nil {
		return nil, nil, err
	}
	r := x.Rules()
	if withBroker {
		switch c, ok := r.Credentials(cfg.ACLAccessKey); {
		case !ok && cfg.ACLAccessKey != "":
			return nil, nil, fmt.Errorf("STRATAMQ_ACL_ACCESS_KEY=%q: no such account in STRATAMQ_ACL_FILE=%s", cfg.ACLAccessKey, cfg.ACLFile)
		case !ok:
			log.Warn("STRATAMQ_ACL_FILE has no admin account: the broker's own requests (registration with the name servers, a slave's calls to its master) go unsigned, and a name server with an ACL refuses them",
				"file", cfg.ACLFile)
		default:
			log.Info("ACL on", "file", cfg.ACLFile, "accounts", r.Accounts(), "broker signs as", c.AccessKey)
		}
	} else {
		log.Info("ACL on", "file", cfg.ACLFile, "accounts", r.Accounts())
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); x.Run(ctx) }()
	return x, func() { cancel(); <-done }, nil
}

// credentialFlags adds --access-key and --secret-key to fs, with
// STRATAMQ_ACCESS_KEY and STRATAMQ_SECRET_KEY as defaults, for the tools
// that talk to a broker or name server with an ACL (admin, replay -n).
// The secret's flag never prints its value (-h shows no default).
func credentialFlags(fs *flag.FlagSet, environ map[string]string, c *acl.Credentials) {
	c.AccessKey = environ[envAccessKey]
	c.SecretKey = acl.Secret(environ[envSecretKey])
	fs.StringVar(&c.AccessKey, "access-key", c.AccessKey, "ACL account to sign requests with ("+envAccessKey+")")
	fs.Var((*secretFlag)(&c.SecretKey), "secret-key", "its secret key ("+envSecretKey+"; the variable keeps it out of the process list)")
}

// checkCredentials refuses half a pair.
func checkCredentials(c acl.Credentials) error {
	if (c.AccessKey == "") != (c.SecretKey == "") {
		return fmt.Errorf("--access-key and --secret-key (%s, %s) go together", envAccessKey, envSecretKey)
	}
	return nil
}

// secretFlag is a flag.Value that never shows its value.
type secretFlag acl.Secret

func (s *secretFlag) String() string     { return "" }
func (s *secretFlag) Set(v string) error { *s = secretFlag(v); return nil }

// namesrvUsers is namesrv.Config.Users with ACL 2.0's authentication on:
// the users of the broker in this process (node, once it runs), and the
// initial user (STRATAMQ_INIT_AUTHENTICATION_USER), a Super user, which
// is all a name server without a broker knows. Nil (the name server's
// admin codes stay with ACL 1.0, or open) when authentication is off, or
// when nobody could sign them: no initial user and no ACL file (the
// broker's own registration would be refused).
func namesrvUsers(cfg Config, hasACLFile bool, log *slog.Logger, node func() *broker.Node) func(string) (acl.Secret, bool, bool) {
	if !cfg.AuthenticationEnabled {
		return nil
	}
	init := cfg.InitAuthenticationUser
	if init == nil && !hasACLFile {
		log.Warn("STRATAMQ_AUTHENTICATION_ENABLED without STRATAMQ_INIT_AUTHENTICATION_USER or STRATAMQ_ACL_FILE: the name server's route and KV writes stay open (no Super user could sign them)")
		return nil
	}
	return func(ak string) (acl.Secret, bool, bool) {
		if n := node(); n != nil {
			if b := n.Broker(); b != nil {
				if s, super, ok := b.UserSecret(ak); ok {
					return s, super, true
				}
			}
		}
		if init != nil && ak == init.Username {
			return acl.Secret(init.Password), true, true
		}
		return "", false, false
	}
}
