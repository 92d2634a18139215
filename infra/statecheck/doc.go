// Package statecheck is a test helper: it finds, by type-checking a
// package, which of its files use which fields of its struct types, and
// judges the uses of one struct's fields by a rule of ownership. The
// broker's TestBrokerFieldOwners (broker/fieldowners_test.go) runs it
// over the Broker struct.
//
// # What counts
//
// A use is a selector of a field (b.f). It is a write when the field is
// assigned to, incremented or decremented, has its address taken, is
// delete()d from, or has a mutator of sync/atomic's types called on it
// (Store, Swap, CompareAndSwap, Add, And, Or) — directly or through the
// fields, array and map elements of a value it holds (b.f.g = x writes g
// and f), never through a pointer or a slice (b.p.x = 1 changes what p
// points to, not p). Calling another method on a field (b.locks.lock(),
// b.store.Put()) is a read: the method belongs to the field's type,
// which owns what it changes. Sub records a use that selects on into a
// value field's own fields (b.hastat.since).
//
// # The rule (Check)
//
// A field the constructor alone assigns is wiring: a setting or a
// collaborator. Any file may read it and call its methods.
//
// A field written anywhere after construction is state. It has one owner
// file (Rule.Owners): only that file and the lifecycle files (the ones
// that build, run and stop the value: Rule.Lifecycle) write it or read
// it; every other file asks the owner through a method the owner
// declares. Every state field must have an owner, and an owner entry for
// a field that is no longer state is an error, so the table stays true.
//
// No file but the one declaring a field's type selects into that
// field's own fields (b.hastat.since outside ha_status.go), except the
// plain settings types (Rule.Settings: Config, TLS).
//
// What the rule refuses and stays is listed in Rule.Allow, one entry per
// file and field with its reason; an entry no use needs any more is an
// error.
//
// # Limits
//
// It reads the package's non-test files (tests may reach in), by their
// syntax and types: a field reached through reflection, or through a
// pointer to it handed out by its owner (&b.recall from recalls()), is
// the owner's handout and not seen where it is used. It needs the go
// command (go list -export) for its dependencies' export data.
package statecheck
