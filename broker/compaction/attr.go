package compaction

import "fmt"

// Attribute is the topic attribute that makes a topic compacted
// (RocketMQ 5's cleanup.policy).
const Attribute = "cleanup.policy"

// The values of Attribute, as RocketMQ spells them.
const (
	PolicyDelete     = "DELETE"     // retention deletes old messages (the default)
	PolicyCompaction = "COMPACTION" // keep the latest message of every key
)

// CheckPolicy reports whether v is a cleanup.policy value.
func CheckPolicy(v string) error {
	if v != PolicyDelete && v != PolicyCompaction {
		return fmt.Errorf("%s=%q: want %s or %s", Attribute, v, PolicyDelete, PolicyCompaction)
	}
	return nil
}

// IsCompacted reports whether a topic with these attributes is compacted.
func IsCompacted(attrs map[string]string) bool { return attrs[Attribute] == PolicyCompaction }
