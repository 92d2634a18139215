// Command stratamq runs the StrataMQ name server and broker.
//
//	stratamq serve     name server + broker in one process (the default to start with)
//	stratamq namesrv   name server only
//	stratamq broker    broker only; registers with STRATAMQ_NAMESRV
//	stratamq bench     load generator (produce|consume|e2e) over the remoting protocol
//
// Every setting is an environment variable STRATAMQ_<NAME> and a flag
// --<name> (flags win); `stratamq serve -h` lists them.
package main
