package acl

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// DefaultPollInterval is how often Run looks at the ACL file.
const DefaultPollInterval = 2 * time.Second

// Options configure Open. Zero values mean defaults.
type Options struct {
	PollInterval time.Duration // default DefaultPollInterval
	Logger       *slog.Logger
	// OnDeny, when set, is called with each refused request's code and
	// remark (metrics, tests). It must not block.
	OnDeny func(code remoting.RequestCode, remark string)
}

// ACL holds the rules of one plain_acl.yml, reloaded by Run when the file
// changes, and checks requests against them. It is safe for concurrent
// use.
type ACL struct {
	path  string
	opt   Options
	log   *slog.Logger
	rules atomic.Pointer[Rules]
	peers peers

	// Owned by Run's goroutine: what the file looked like when last read.
	stamp fileStamp
}

// fileStamp is what decides that the file changed: its modification
// time and size, and the hash of its bytes (an edit within the same
// second of the same length changes only the hash).
type fileStamp struct {
	mod  time.Time
	size int64
	sum  [sha256.Size]byte
}

// Open loads the rules at path. A missing or malformed file is an error:
// a broker started with STRATAMQ_ACL_FILE must not start open.
func Open(path string, opt Options) (*ACL, error) {
	if opt.PollInterval <= 0 {
		opt.PollInterval = DefaultPollInterval
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	x := &ACL{path: path, opt: opt, log: opt.Logger.With("component", "acl")}
	x.peers.m = make(map[uint64]*peerSlot)
	st, data, err := readStamp(path)
	if err != nil {
		return nil, err
	}
	r, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("STRATAMQ_ACL_FILE=%s: %w", path, err)
	}
	x.stamp = st
	x.rules.Store(r)
	for _, w := range r.Warnings {
		x.log.Warn("acl: "+w, "file", path)
	}
	return x, nil
}

// NewStatic returns an ACL of fixed rules (tests; nothing to reload).
func NewStatic(r *Rules, opt Options) *ACL {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	x := &ACL{opt: opt, log: opt.Logger.With("component", "acl")}
	x.peers.m = make(map[uint64]*peerSlot)
	x.rules.Store(r)
	return x
}

func readStamp(path string) (fileStamp, []byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, nil, fmt.Errorf("STRATAMQ_ACL_FILE: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fileStamp{}, nil, fmt.Errorf("STRATAMQ_ACL_FILE: %w", err)
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size(), sum: sha256.Sum256(data)}, data, nil
}

// Path is the file the rules come from ("" for NewStatic).
func (x *ACL) Path() string { return x.path }

// Rules returns the rules in force.
func (x *ACL) Rules() *Rules { return x.rules.Load() }

// Run reloads the file whenever it changes, until ctx is done: every
// PollInterval it compares the file's modification time and size, and
// every few polls its hash too, with the last read. A file that no longer
// parses (or cannot be read) keeps the old rules in force and logs an
// error naming the problem; it is read again at the next change. Run owns
// its ticker and returns when ctx ends.
func (x *ACL) Run(ctx context.Context) {
	if x.path == "" {
		return
	}
	t := time.NewTicker(x.opt.PollInterval)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		x.poll(n%5 == 0)
	}
}

// poll reloads the file when it changed; hash forces a hash of the bytes
// even when the time and size are the same.
func (x *ACL) poll(hash bool) {
	fi, err := os.Stat(x.path)
	if err != nil {
		if x.stamp.size != -1 {
			x.log.Error("acl: cannot read the ACL file; the rules loaded before stay in force", "file", x.path, "err", err)
			x.stamp.size = -1
		}
		return
	}
	if !hash && fi.ModTime().Equal(x.stamp.mod) && fi.Size() == x.stamp.size {
		return
	}
	st, data, err := readStamp(x.path)
	if err != nil {
		x.log.Error("acl: cannot read the ACL file; the rules loaded before stay in force", "file", x.path, "err", err)
		return
	}
	if bytes.Equal(st.sum[:], x.stamp.sum[:]) {
		x.stamp = st
		return
	}
	x.stamp = st
	r, err := Parse(data)
	if err != nil {
		x.log.Error("acl: the ACL file changed but does not parse; the rules loaded before stay in force", "file", x.path, "err", err)
		return
	}
	for _, w := range r.Warnings {
		x.log.Warn("acl: "+w, "file", x.path)
	}
	x.rules.Store(r)
	x.log.Info("acl: rules reloaded", "file", x.path, "accounts", len(r.accounts), "globalWhiteRemoteAddresses", len(r.globalWhite))
}

// CheckBroker checks a broker request: nil when it may go on, else the
// NO_PERMISSION response to send.
func (x *ACL) CheckBroker(c *remoting.Conn, req *remoting.Command) *remoting.Command {
	return x.respond(c, req, scopeBroker)
}

// CheckNamesrv checks a name-server request: only the codes that change
// routes or KV config (IsNamesrvAdminCode) are checked; they need an
// admin account.
func (x *ACL) CheckNamesrv(c *remoting.Conn, req *remoting.Command) *remoting.Command {
	return x.respond(c, req, scopeNamesrv)
}

func (x *ACL) respond(c *remoting.Conn, req *remoting.Command, sc scope) *remoting.Command {
	id, addr, done := peerOf(c)
	d := x.check(id, addr, done, req, sc)
	if d == nil {
		return nil
	}
	x.log.Debug("acl: request refused", "code", req.Code, "reason", d.Reason)
	if x.opt.OnDeny != nil {
		x.opt.OnDeny(remoting.RequestCode(req.Code), d.Reason)
	}
	return remoting.NewResponse(req, remoting.NoPermission, d.Reason)
}

// CheckStored checks, for a request CheckBroker let through, one more
// resource the broker found while handling it: the topic of the stored
// message a CONSUMER_SEND_MSG_BACK or VIEW_MESSAGE_BY_ID reads by its
// offset (the header names no topic, or one the client chose). A retry
// or dead-letter topic is its group's. nil: allowed; else NO_PERMISSION,
// whose remark does not name the topic (the caller chose the offset).
func (x *ACL) CheckStored(c *remoting.Conn, req *remoting.Command, topic string, perm Perm) *remoting.Command {
	var buf [40]remoting.ExtField
	pairs := req.AppendExtPairs(buf[:0])
	id, addr, done := peerOf(c)
	d := x.viewOf(id, addr, done, pairs).allows(req, topic, perm)
	if d == nil {
		return nil
	}
	if x.opt.OnDeny != nil {
		x.opt.OnDeny(remoting.RequestCode(req.Code), d.Reason)
	}
	return remoting.NewResponse(req, remoting.NoPermission, d.Reason)
}

// ConnClosed forgets what was cached for c at once (without it, the
// cache drops closed conns when it has doubled in size).
func (x *ACL) ConnClosed(c *remoting.Conn) { x.peers.drop(c.ID()) }

// Credentials returns the credentials of the account with accessKey in
// the rules in force, or of the first admin account when accessKey is
// empty.
func (x *ACL) Credentials(accessKey string) (Credentials, bool) {
	return x.rules.Load().Credentials(accessKey)
}
