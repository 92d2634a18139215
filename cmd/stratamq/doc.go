// Command stratamq runs the StrataMQ name server and broker.
//
//	stratamq serve     name server + broker in one process (the default to start with)
//	stratamq namesrv   name server only
//	stratamq broker    broker only; registers with STRATAMQ_NAMESRV
//	stratamq bench     load generator (produce|consume|e2e) over the remoting protocol
//	stratamq admin     operations on running brokers, mqadmin-style (-n, -b, -c): haStatus,
//	                   promote, demote, dlqList, dlqResend; admin.go holds the table of
//	                   commands, one func each (the DLQ ones in admin_dlq.go)
//
// The metrics/health listener (STRATAMQ_HTTP_LISTEN) also serves GET /ha,
// the broker's HA status as JSON (admin_http.go).
//
// Every setting is an environment variable STRATAMQ_<NAME> and a flag
// --<name> (flags win); `stratamq serve -h` lists them.
//
// At start the soft RLIMIT_NOFILE is raised to the hard limit (both are
// logged), and STRATAMQ_MAX_OPEN_QUEUE_FILES is kept within half of it
// (rlimit_unix.go).
package main
