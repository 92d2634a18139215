package store

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidTopic: a topic that is not one plain path element (empty, "."
// or "..", or holding '/', '\\' or NUL). A topic names the directory
// consumequeue/<topic>/, so the store refuses such a name everywhere:
// Put, DeleteTopic, dispatch of records read back from the log (recovery,
// AppendRaw), restored queue tables and the directories recovery finds.
// The broker applies RocketMQ's stricter charset before the store sees a
// name; this is the last line.
var ErrInvalidTopic = errors.New("store: invalid topic name")

// checkTopic returns ErrInvalidTopic (wrapped, with the name quoted) when
// topic is not one plain path element.
func checkTopic(topic string) error {
	var why string
	switch {
	case topic == "":
		why = "empty"
	case topic == "." || topic == "..":
		why = "a relative directory"
	case strings.ContainsAny(topic, "/\\\x00"):
		why = "it holds '/', '\\\\' or NUL"
	default:
		return nil
	}
	return fmt.Errorf("%w: %s: %s; a topic must be one plain path element", ErrInvalidTopic, quoteTopic(topic), why)
}

func quoteTopic(t string) string {
	if len(t) > 64 {
		return fmt.Sprintf("%q... (%d bytes)", t[:64], len(t))
	}
	return fmt.Sprintf("%q", t)
}

// skipRecordTopic reports whether a record read back from the log has a
// topic that cannot have a consumequeue: it stays in the commitlog but is
// not dispatched. The first such record and every 1,024th are logged.
func (s *Store) skipRecordTopic(topic []byte) bool {
	err := checkTopic(string(topic))
	if err == nil {
		return false
	}
	if n := s.badTopics.Add(1); n == 1 || n%1024 == 0 {
		s.log.Warn("store: records with an invalid topic are kept in the commitlog but get no consumequeue entry", "err", err, "records", n)
	}
	return true
}

// skipQueueDir reports whether a directory recovery found under
// consumequeue/ is not a valid topic; it is left alone (not opened, not
// removed).
func (s *Store) skipQueueDir(name string) bool {
	if err := checkTopic(name); err != nil {
		s.log.Warn("store: ignoring a consumequeue directory that is not a valid topic", "err", err)
		return true
	}
	return false
}
