// Package sysmon keeps the Go runtime's system monitor awake in a serving
// process: it owns the one re-execution of `stratamq serve` and `stratamq
// broker` at start, with schedtrace added to GODEBUG, and the knob that
// turns it off (STRATAMQ_SYSMON).
//
// The re-execution happens in this package's init, which the Go runtime
// runs right after the few standard packages it needs and before the rest
// of the binary's packages initialize: done from main, that initialization
// (about 13 ms of a start on this project's test machine) ran twice.
// Nothing else in the process has started by then.
package sysmon
