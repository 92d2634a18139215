package schedule

import (
	"github.com/stratamq/stratamq/broker/msgprop"

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

// The property helpers of msgprop, under the names this package uses.
var (
	propValue   = msgprop.Value
	setProp     = msgprop.Set
	setIntProp  = msgprop.SetInt
	removeProps = msgprop.Remove
)

// tagsCode is the consumequeue tag hash of a TAGS property (0 = no tag).
func tagsCode(tags string) int64 {
	if tags == "" {
		return 0
	}
	return store.TagsHash(tags)
}
