// Command stratamq runs the StrataMQ name server and broker.
//
//	stratamq serve     name server + broker in one process (the default to start with)
//	stratamq namesrv   name server only
//	stratamq broker    broker only; registers with STRATAMQ_NAMESRV
//	stratamq bench     load generator (produce|consume|e2e) over the remoting protocol
//
// Every setting is an environment variable STRATAMQ_<NAME> and a flag
// --<name> (flags win); `stratamq serve -h` lists them.
//
// At start the soft RLIMIT_NOFILE is raised to the hard limit (both are
// logged), and STRATAMQ_MAX_OPEN_QUEUE_FILES is kept within half of it
// (rlimit_unix.go).
package main
