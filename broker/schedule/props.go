package schedule

import (
	"strings"

	"github.com/stratamq/stratamq/store"
)

// Message property keys the service reads and writes (RocketMQ
// MessageConst; the broker names the same keys Prop*).
const (
	propTags        = "TAGS"
	propUniqKey     = "UNIQ_KEY"
	propDelay       = "DELAY"
	propRealTopic   = "REAL_TOPIC"
	propRealQueueID = "REAL_QID"
)

// retryTopicPrefix starts a consumer group's retry topic (%RETRY%<group>).
const retryTopicPrefix = "%RETRY%"

const (
	nameValueSep = '\x01'
	propertySep  = '\x02'
)

// propValue finds key in an encoded properties string (k\x01v\x02...). It
// accepts Java's form, which has no separator after the last pair.
func propValue(props, key string) (string, bool) {
	for len(props) > 0 {
		end := strings.IndexByte(props, propertySep)
		pair := props
		if end >= 0 {
			pair, props = props[:end], props[end+1:]
		} else {
			props = ""
		}
		k, v, ok := strings.Cut(pair, string(nameValueSep))
		if ok && k == key {
			return v, true
		}
	}
	return "", false
}

// setProp returns props with key set to v (an existing pair removed).
func setProp(props, key, v string) string {
	props = removeProps(props, key)
	if props != "" && props[len(props)-1] != propertySep {
		props += string(propertySep)
	}
	return props + key + string(nameValueSep) + v + string(propertySep)
}

// removeProps returns props without the pairs of keys, order kept.
func removeProps(props string, keys ...string) string {
	found := false
	for _, k := range keys {
		if _, ok := propValue(props, k); ok {
			found = true
		}
	}
	if !found {
		return props
	}
	var sb strings.Builder
	for _, pair := range strings.Split(props, string(propertySep)) {
		if pair == "" {
			continue
		}
		k, _, _ := strings.Cut(pair, string(nameValueSep))
		drop := false
		for _, d := range keys {
			if k == d {
				drop = true
			}
		}
		if !drop {
			sb.WriteString(pair)
			sb.WriteByte(propertySep)
		}
	}
	return sb.String()
}

// tagsCode is the consumequeue tag hash of a TAGS property (0 = no tag).
func tagsCode(tags string) int64 {
	if tags == "" {
		return 0
	}
	return store.TagsHash(tags)
}
