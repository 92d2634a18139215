// Package configtable is the versioned name → config table the broker's
// topic manager (topics.json) and package consumers' Groups
// (subscriptionGroup.json) embed: every change bumps a RocketMQ
// DataVersion, Save writes the file atomically when the version moved
// since the last save, AddSaved makes a new entry visible only once a save
// holding it returned, and Mirror makes the table a copy of a master's.
//
// It owns no goroutine and decides nothing of its own: the embedding
// manager holds Mu for its rules and encodes the file (SaveWith). It must
// never import package broker or a feature package, and never hold Mu
// across I/O.
package configtable
