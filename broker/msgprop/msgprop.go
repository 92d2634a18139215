package msgprop

import (
	"slices"
	"strconv"
	"strings"
)

// Property keys (RocketMQ MessageConst).
const (
	Tags              = "TAGS"
	Keys              = "KEYS"
	UniqKey           = "UNIQ_KEY"
	Delay             = "DELAY"
	TranMsg           = "TRAN_MSG"
	RetryTopic        = "RETRY_TOPIC"
	OriginMessageID   = "ORIGIN_MESSAGE_ID"
	ReconsumeTime     = "RECONSUME_TIME"
	MaxReconsumeTimes = "MAX_RECONSUME_TIMES"
	RealTopic         = "REAL_TOPIC"
	RealQueueID       = "REAL_QID"
	ProducerGroup     = "PGROUP"
)

// The separators.
const (
	NameValueSep = '\x01'
	PropertySep  = '\x02'
)

// Value finds key in an encoded properties string. It accepts Java's form,
// which has no separator after the last pair.
func Value(props, key string) (string, bool) {
	for len(props) > 0 {
		end := strings.IndexByte(props, PropertySep)
		pair := props
		if end >= 0 {
			pair, props = props[:end], props[end+1:]
		} else {
			props = ""
		}
		k, v, ok := strings.Cut(pair, string(NameValueSep))
		if ok && k == key {
			return v, true
		}
	}
	return "", false
}

// Parse decodes a properties string into a map.
func Parse(props string) map[string]string {
	m := map[string]string{}
	for _, pair := range strings.Split(props, string(PropertySep)) {
		if k, v, ok := strings.Cut(pair, string(NameValueSep)); ok {
			m[k] = v
		}
	}
	return m
}

// Encode encodes a map with the trailing separator client-go writes.
func Encode(m map[string]string) string {
	var sb strings.Builder
	for k, v := range m {
		sb.WriteString(k)
		sb.WriteByte(NameValueSep)
		sb.WriteString(v)
		sb.WriteByte(PropertySep)
	}
	return sb.String()
}

// Without returns props without keys, in the order it had, each pair
// ended by a separator.
func Without(props string, keys ...string) string {
	var sb strings.Builder
	sb.Grow(len(props))
	for _, pair := range strings.Split(props, string(PropertySep)) {
		k, _, ok := strings.Cut(pair, string(NameValueSep))
		if !ok {
			continue
		}
		drop := false
		for _, key := range keys {
			drop = drop || k == key
		}
		if !drop {
			sb.WriteString(pair)
			sb.WriteByte(PropertySep)
		}
	}
	return sb.String()
}

// With returns props with key set to value (replaced where present, else
// appended).
func With(props, key, value string) string {
	return Without(props, key) + key + string(NameValueSep) + value + string(PropertySep)
}

// Remove returns props without the pairs of keys, order kept; props itself
// (byte for byte) when it has none of them. Unlike Without it keeps a
// string that holds no such key as it is (Java's form with no trailing
// separator included), so records that are only read do not change size.
func Remove(props string, keys ...string) string {
	found := false
	for _, k := range keys {
		if _, ok := Value(props, k); ok {
			found = true
		}
	}
	if !found {
		return props
	}
	// One allocation: the result, never longer than props.
	var sb strings.Builder
	sb.Grow(len(props))
	for rest := props; rest != ""; {
		var pair string
		pair, rest, _ = strings.Cut(rest, string(PropertySep))
		if pair == "" {
			continue
		}
		if k, _, _ := strings.Cut(pair, string(NameValueSep)); !slices.Contains(keys, k) {
			sb.WriteString(pair)
			sb.WriteByte(PropertySep)
		}
	}
	return sb.String()
}

// Set returns props with key set to v: Remove'd of key, then the pair
// appended after a separator.
func Set(props, key, v string) string {
	var sb strings.Builder
	setTo(&sb, props, key, len(v))
	sb.WriteString(v)
	sb.WriteByte(PropertySep)
	return sb.String()
}

// SetInt is Set with v's decimal digits, in one allocation.
func SetInt(props, key string, v int64) string {
	var sb strings.Builder
	setTo(&sb, props, key, 20)
	var digits [20]byte
	sb.Write(strconv.AppendInt(digits[:0], v, 10))
	sb.WriteByte(PropertySep)
	return sb.String()
}

// setTo writes props without key, a separator and key's name and
// NameValueSep to sb, grown for a value of up to n bytes.
func setTo(sb *strings.Builder, props, key string, n int) {
	props = Remove(props, key)
	sb.Grow(len(props) + len(key) + n + 3)
	sb.WriteString(props)
	if props != "" && props[len(props)-1] != PropertySep {
		sb.WriteByte(PropertySep)
	}
	sb.WriteString(key)
	sb.WriteByte(NameValueSep)
}
