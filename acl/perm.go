package acl

import "strings"

// Perm is a RocketMQ permission: a set of the bits below.
type Perm byte

// Permission bits, RocketMQ's values (acl Permission).
const (
	Deny Perm = 1 << 0
	Any  Perm = 1 << 1 // needed: PUB or SUB will do
	Pub  Perm = 1 << 2
	Sub  Perm = 1 << 3
)

// ParsePerm reads "PUB", "SUB", "PUB|SUB" (or "SUB|PUB") and "DENY", as
// RocketMQ does: anything else, the empty string included, is DENY. ok is
// false for a value that was not one of those words.
func ParsePerm(s string) (p Perm, ok bool) {
	switch strings.TrimSpace(s) {
	case "PUB":
		return Pub, true
	case "SUB":
		return Sub, true
	case "PUB|SUB", "SUB|PUB":
		return Pub | Sub, true
	case "DENY":
		return Deny, true
	}
	return Deny, false
}

// Allows reports whether an account owning p may do what needs need:
// DENY refuses everything; ANY is met by PUB or SUB; otherwise the bits
// must overlap (RocketMQ's Permission.checkPermission).
func (p Perm) Allows(need Perm) bool {
	if p&Deny != 0 {
		return false
	}
	if need&Any != 0 {
		return p&(Pub|Sub) != 0
	}
	return need&p != 0
}

func (p Perm) String() string {
	switch {
	case p&Deny != 0:
		return "DENY"
	case p&(Pub|Sub) == Pub|Sub:
		return "PUB|SUB"
	case p&Pub != 0:
		return "PUB"
	case p&Sub != 0:
		return "SUB"
	case p&Any != 0:
		return "PUB or SUB"
	}
	return "NONE"
}
