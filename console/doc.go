// Package console is StrataMQ's web console: HTML pages served at / on the
// HTTP listener (STRATAMQ_HTTP_LISTEN, beside /metrics, /healthz and /ha),
// and the actions a signed-in user sends through them.
//
// It owns the pages, their templates and stylesheet (embedded with
// go:embed: nothing is fetched from the internet at run time, and the
// pages run no script), and the validation of every query parameter. It
// owns no broker state: every figure comes from the Broker interface,
// which *broker.Broker satisfies through the read-only views of
// broker/console_view.go, the same in-process computations the admin
// commands and /metrics use (TierStatus, the queue bounds, the consumer
// offsets and their lag, the key index, the queue offset by time).
//
// Pages:
//
//	/          the broker: cluster, name, role, epoch, uptime, versions, log range
//	/topics    every topic with its queues and message count
//	/topic     one topic's queues: min and max, where the local range starts,
//	           how far the bucket holds it, the groups reading it
//	/groups    consumer groups: clients, committed offsets and lag per queue
//	/tier      tier status: local and bucket bytes, upload lag, oldest
//	           retained message, request counts
//	/messages  the message browser: by topic and queue from an offset or a
//	           time, by key, or by message id; properties and body previews
//	/login     sign-in (POST), /logout sign-out (POST)
//	/actions   the actions; /action?do= one's form, POST: its confirmation,
//	           then the request
//
// It answers only requests whose Host header is an IP address, localhost
// or one of Config.Hosts (cmd/stratamq: STRATAMQ_HTTP_HOSTS, the machine's
// host name, the advertised and listen hosts); any other is 403, so a web
// page whose name an attacker rebinds to the broker's address (DNS
// rebinding) cannot read the console through a browser that reaches it.
//
// Writes (auth.go, write.go, actions.go): an action is the request an
// admin client sends, built from a form, shown for confirmation and sent
// through Broker.ConsoleInvoke signed as the signed-in user (the broker's
// own request handling, from the browser's address: its ACL decides). With
// an ACL a session is needed (an HttpOnly, SameSite=Strict cookie naming a
// random token the Handler keeps in memory with the user, until sign-out or
// Config.SessionTTL); without one, writes come only from loopback unless
// Config.Write. Every POST must come from this console's pages (Origin,
// Sec-Fetch-Site) and carry a one-time form token of its session. With an
// ACL the message browser shows a topic to a user the broker lets read it
// (GET_MIN_OFFSET, which needs SUB on the topic, sent as the user).
//
// What it must never do: change anything but through an action's request
// (only /login, /logout and /action take POST; every other method is 405),
// show or log a secret, trust a query parameter or form field (each is
// checked, and a bad one is a 400 page saying which and why), or hold more
// than a bounded amount of message data (at most broker.ConsoleMaxMessages
// messages per page, a body preview of at most broker.ConsoleMaxPreview
// bytes, and at most maxMessagePages message pages read at once), sessions
// (maxSessions) or form tokens (maxTokens a session). Every handler passes
// its request's context, bounded by Config.Timeout, to the broker.
//
// Use:
//
//	h := console.New(console.Config{Broker: func() console.Broker { return node.Broker() }, Version: version})
//	mux.Handle("/", h)
package console
