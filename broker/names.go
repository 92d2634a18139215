package broker

import (
	"fmt"

	"github.com/stratamq/stratamq/remoting"
)

// Every request that takes a topic or a consumer group to a file path, a
// table key or a config table checks it first with remoting.ValidateTopic
// and ValidateGroup (RocketMQ 4.9's charset and lengths). A refused name is
// answered SYSTEM_ERROR with a remark that quotes it and names the rule, as
// 4.9's TopicValidator.validateTopic answers; nothing is created or
// changed. Producer groups reach only the in-memory producer table and
// are not checked (client-go does not check them either).

// badTopic returns the response refusing topic, or nil when it is valid.
func badTopic(req *remoting.Command, topic string) *remoting.Command {
	if err := remoting.ValidateTopic(topic); err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	return nil
}

// badGroup returns the response refusing a consumer group, or nil.
func badGroup(req *remoting.Command, group string) *remoting.Command {
	if err := remoting.ValidateGroup(group); err != nil {
		return errResponse(req, remoting.SystemError, err.Error())
	}
	return nil
}

// badTopicAndGroup checks both; the topic first.
func badTopicAndGroup(req *remoting.Command, topic, group string) *remoting.Command {
	if r := badTopic(req, topic); r != nil {
		return r
	}
	return badGroup(req, group)
}

// systemTopicConflict refuses creating or deleting a RocketMQ system
// topic through the admin codes, as 4.9 does.
func systemTopicConflict(req *remoting.Command, topic string) *remoting.Command {
	if remoting.IsSystemTopic(topic) {
		return errResponse(req, remoting.SystemError, fmt.Sprintf("The topic[%s] is conflict with system topic.", topic))
	}
	return nil
}

// retryTopicFor returns %RETRY%<group>, or an error when that name is not a
// valid topic (a group longer than 120 bytes).
func retryTopicFor(group string) (string, error) {
	t := RetryGroupTopicPrefix + group
	if err := remoting.ValidateTopic(t); err != nil {
		return "", fmt.Errorf("the retry topic of group %s: %w", remoting.QuoteName(group), err)
	}
	return t, nil
}

// badMQSet checks the group and every queue's topic of a LOCK/UNLOCK_BATCH_MQ body.
func badMQSet(req *remoting.Command, body remoting.LockBatchRequestBody) *remoting.Command {
	if r := badGroup(req, body.ConsumerGroup); r != nil {
		return r
	}
	for _, mq := range body.MQSet {
		if r := badTopic(req, mq.Topic); r != nil {
			return r
		}
	}
	return nil
}
