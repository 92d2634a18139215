// Package msgprop reads and writes a message's properties string, as
// RocketMQ encodes it (MessageDecoder.messageProperties2String): name and
// value joined by \x01, pairs ended by \x02, Java leaving the separator
// after the last pair out:
//
//	TAGS\x01a\x02UNIQ_KEY\x01C0A8...\x02REAL_TOPIC\x01Orders
//
// It names the keys (RocketMQ's MessageConst) that more than one part of
// the broker reads. (broker/properties.go still has its own propValue and
// parseProps, kept while other packages move out of broker/; they are the
// same code.) It is a leaf: it imports nothing of ours, allocates
// only where it returns a new string or map, and never looks at a body.
package msgprop
