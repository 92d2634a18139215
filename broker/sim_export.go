package broker

// Accessors for the fault simulator (package broker/simtest), which runs
// Nodes from outside the package: what role and epoch a generation has and
// whether its master sees its slaves in sync. Read-only.

// Role is the running generation's role ("" while between generations or
// shutting down).
func (n *Node) Role() string {
	if b := n.Broker(); b != nil && !b.stopping() {
		return b.cfg.Role
	}
	return ""
}

// Epoch is the lease epoch a master generation holds (0 for a slave or
// without a bucket).
func (b *Broker) Epoch() int64 { return b.epoch() }

// HASlaves is how many slaves the generation's HA master sees connected,
// and how many of them have acknowledged its whole log.
func (b *Broker) HASlaves() (connected, caughtUp int) {
	m := b.repl.Master()
	if m == nil {
		return 0, 0
	}
	end := b.store.MaxPhysOffset()
	for _, s := range m.Slaves() {
		connected++
		if s.Acked >= end {
			caughtUp++
		}
	}
	return connected, caughtUp
}
