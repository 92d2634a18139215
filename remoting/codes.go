package remoting

import "strconv"

// RequestCode is the code of a request command (RocketMQ's RequestCode).
type RequestCode int32

// Request codes, named after RocketMQ's RequestCode constants in CamelCase.
// docs/rocketmq-protocol.md §2.1 has the table and who sends what.
const (
	SendMessage                      RequestCode = 10
	PullMessage                      RequestCode = 11
	QueryMessage                     RequestCode = 12
	QueryBrokerOffset                RequestCode = 13
	QueryConsumerOffset              RequestCode = 14
	UpdateConsumerOffset             RequestCode = 15
	UpdateAndCreateTopic             RequestCode = 17
	GetAllTopicConfig                RequestCode = 21
	UpdateBrokerConfig               RequestCode = 25
	GetBrokerConfig                  RequestCode = 26
	GetBrokerRuntimeInfo             RequestCode = 28
	SearchOffsetByTimestamp          RequestCode = 29
	GetMaxOffset                     RequestCode = 30
	GetMinOffset                     RequestCode = 31
	GetEarliestMsgStoretime          RequestCode = 32
	ViewMessageByID                  RequestCode = 33
	HeartBeat                        RequestCode = 34
	UnregisterClient                 RequestCode = 35
	ConsumerSendMsgBack              RequestCode = 36
	EndTransaction                   RequestCode = 37
	GetConsumerListByGroup           RequestCode = 38
	CheckTransactionState            RequestCode = 39
	NotifyConsumerIdsChanged         RequestCode = 40
	LockBatchMQ                      RequestCode = 41
	UnlockBatchMQ                    RequestCode = 42
	GetAllConsumerOffset             RequestCode = 43
	GetAllDelayOffset                RequestCode = 45
	CheckClientConfig                RequestCode = 46
	PutKVConfig                      RequestCode = 100
	GetKVConfig                      RequestCode = 101
	DeleteKVConfig                   RequestCode = 102
	RegisterBroker                   RequestCode = 103
	UnregisterBroker                 RequestCode = 104
	GetRouteinfoByTopic              RequestCode = 105
	GetBrokerClusterInfo             RequestCode = 106
	UpdateAndCreateSubscriptionGroup RequestCode = 200
	GetAllSubscriptionGroupConfig    RequestCode = 201
	GetTopicStatsInfo                RequestCode = 202
	GetConsumerConnectionList        RequestCode = 203
	GetProducerConnectionList        RequestCode = 204
	WipeWritePermOfBroker            RequestCode = 205
	GetAllTopicListFromNameserver    RequestCode = 206
	DeleteSubscriptionGroup          RequestCode = 207
	GetConsumeStats                  RequestCode = 208
	DeleteTopicInBroker              RequestCode = 215
	DeleteTopicInNamesrv             RequestCode = 216
	RegisterTopicInNamesrv           RequestCode = 217
	GetKVListByNamespace             RequestCode = 219
	ResetConsumerClientOffset        RequestCode = 220
	GetConsumerStatusFromClient      RequestCode = 221
	InvokeBrokerToResetOffset        RequestCode = 222
	InvokeBrokerToGetConsumerStatus  RequestCode = 223
	GetTopicsByCluster               RequestCode = 224
	QueryTopicConsumeByWho           RequestCode = 300
	GetConsumerRunningInfo           RequestCode = 307
	ConsumeMessageDirectly           RequestCode = 309
	SendMessageV2                    RequestCode = 310
	SendBatchMessage                 RequestCode = 320
	QueryDataVersion                 RequestCode = 322
	SendReplyMessage                 RequestCode = 324
	SendReplyMessageV2               RequestCode = 325
	PushReplyMessageToClient         RequestCode = 326
	LitePullMessage                  RequestCode = 361
	QueryAssignment                  RequestCode = 400
	SetMessageRequestMode            RequestCode = 401
	BrokerHeartbeat                  RequestCode = 904
	GetBrokerHAStatus                RequestCode = 907
	PopMessage                       RequestCode = 200050
	AckMessage                       RequestCode = 200051
	ChangeMessageInvisibleTime       RequestCode = 200053

	// ACL 2.0's admin codes (RocketMQ 5.3, package acl2).
	AuthCreateUser RequestCode = 3001
	AuthUpdateUser RequestCode = 3002
	AuthDeleteUser RequestCode = 3003
	AuthGetUser    RequestCode = 3004
	AuthListUser   RequestCode = 3005
	AuthCreateAcl  RequestCode = 3006
	AuthUpdateAcl  RequestCode = 3007
	AuthDeleteAcl  RequestCode = 3008
	AuthGetAcl     RequestCode = 3009
	AuthListAcl    RequestCode = 3010

	// StrataMQ's own admin codes, in a private range RocketMQ does not use
	// (880000-880999; RocketMQ's highest are the 2000xx pop codes).
	PromoteBroker RequestCode = 880001 // admin promote: a slave takes the lease and becomes master
	DemoteBroker  RequestCode = 880002 // admin demote: a master hands the lease over and rejoins as a slave
	DLQList       RequestCode = 880003 // admin dlqList: a group's dead-letter messages
	DLQResend     RequestCode = 880004 // admin dlqResend: dead-letter messages back to the group's retry topic
	// TopicRetention: admin topicRetention, each topic's retention and the bytes it holds back.
	TopicRetention RequestCode = 880005
	// TierStatus: admin tierStatus, the local and bucket tiers of a broker's log.
	TierStatus RequestCode = 880006
)

var requestCodeNames = map[RequestCode]string{
	AuthCreateUser:                   "AUTH_CREATE_USER",
	AuthUpdateUser:                   "AUTH_UPDATE_USER",
	AuthDeleteUser:                   "AUTH_DELETE_USER",
	AuthGetUser:                      "AUTH_GET_USER",
	AuthListUser:                     "AUTH_LIST_USER",
	AuthCreateAcl:                    "AUTH_CREATE_ACL",
	AuthUpdateAcl:                    "AUTH_UPDATE_ACL",
	AuthDeleteAcl:                    "AUTH_DELETE_ACL",
	AuthGetAcl:                       "AUTH_GET_ACL",
	AuthListAcl:                      "AUTH_LIST_ACL",
	SendMessage:                      "SEND_MESSAGE",
	PullMessage:                      "PULL_MESSAGE",
	QueryMessage:                     "QUERY_MESSAGE",
	QueryBrokerOffset:                "QUERY_BROKER_OFFSET",
	QueryConsumerOffset:              "QUERY_CONSUMER_OFFSET",
	UpdateConsumerOffset:             "UPDATE_CONSUMER_OFFSET",
	UpdateAndCreateTopic:             "UPDATE_AND_CREATE_TOPIC",
	GetAllTopicConfig:                "GET_ALL_TOPIC_CONFIG",
	UpdateBrokerConfig:               "UPDATE_BROKER_CONFIG",
	GetBrokerConfig:                  "GET_BROKER_CONFIG",
	GetBrokerRuntimeInfo:             "GET_BROKER_RUNTIME_INFO",
	SearchOffsetByTimestamp:          "SEARCH_OFFSET_BY_TIMESTAMP",
	GetMaxOffset:                     "GET_MAX_OFFSET",
	GetMinOffset:                     "GET_MIN_OFFSET",
	GetEarliestMsgStoretime:          "GET_EARLIEST_MSG_STORETIME",
	ViewMessageByID:                  "VIEW_MESSAGE_BY_ID",
	HeartBeat:                        "HEART_BEAT",
	UnregisterClient:                 "UNREGISTER_CLIENT",
	ConsumerSendMsgBack:              "CONSUMER_SEND_MSG_BACK",
	EndTransaction:                   "END_TRANSACTION",
	GetConsumerListByGroup:           "GET_CONSUMER_LIST_BY_GROUP",
	CheckTransactionState:            "CHECK_TRANSACTION_STATE",
	NotifyConsumerIdsChanged:         "NOTIFY_CONSUMER_IDS_CHANGED",
	LockBatchMQ:                      "LOCK_BATCH_MQ",
	UnlockBatchMQ:                    "UNLOCK_BATCH_MQ",
	GetAllConsumerOffset:             "GET_ALL_CONSUMER_OFFSET",
	GetAllDelayOffset:                "GET_ALL_DELAY_OFFSET",
	CheckClientConfig:                "CHECK_CLIENT_CONFIG",
	PutKVConfig:                      "PUT_KV_CONFIG",
	GetKVConfig:                      "GET_KV_CONFIG",
	DeleteKVConfig:                   "DELETE_KV_CONFIG",
	RegisterBroker:                   "REGISTER_BROKER",
	UnregisterBroker:                 "UNREGISTER_BROKER",
	GetRouteinfoByTopic:              "GET_ROUTEINFO_BY_TOPIC",
	GetBrokerClusterInfo:             "GET_BROKER_CLUSTER_INFO",
	UpdateAndCreateSubscriptionGroup: "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP",
	GetAllSubscriptionGroupConfig:    "GET_ALL_SUBSCRIPTIONGROUP_CONFIG",
	GetTopicStatsInfo:                "GET_TOPIC_STATS_INFO",
	GetConsumerConnectionList:        "GET_CONSUMER_CONNECTION_LIST",
	GetProducerConnectionList:        "GET_PRODUCER_CONNECTION_LIST",
	WipeWritePermOfBroker:            "WIPE_WRITE_PERM_OF_BROKER",
	GetAllTopicListFromNameserver:    "GET_ALL_TOPIC_LIST_FROM_NAMESERVER",
	DeleteSubscriptionGroup:          "DELETE_SUBSCRIPTIONGROUP",
	GetConsumeStats:                  "GET_CONSUME_STATS",
	DeleteTopicInBroker:              "DELETE_TOPIC_IN_BROKER",
	DeleteTopicInNamesrv:             "DELETE_TOPIC_IN_NAMESRV",
	RegisterTopicInNamesrv:           "REGISTER_TOPIC_IN_NAMESRV",
	GetKVListByNamespace:             "GET_KVLIST_BY_NAMESPACE",
	ResetConsumerClientOffset:        "RESET_CONSUMER_CLIENT_OFFSET",
	GetConsumerStatusFromClient:      "GET_CONSUMER_STATUS_FROM_CLIENT",
	InvokeBrokerToResetOffset:        "INVOKE_BROKER_TO_RESET_OFFSET",
	InvokeBrokerToGetConsumerStatus:  "INVOKE_BROKER_TO_GET_CONSUMER_STATUS",
	GetTopicsByCluster:               "GET_TOPICS_BY_CLUSTER",
	QueryTopicConsumeByWho:           "QUERY_TOPIC_CONSUME_BY_WHO",
	GetConsumerRunningInfo:           "GET_CONSUMER_RUNNING_INFO",
	ConsumeMessageDirectly:           "CONSUME_MESSAGE_DIRECTLY",
	SendMessageV2:                    "SEND_MESSAGE_V2",
	SendBatchMessage:                 "SEND_BATCH_MESSAGE",
	QueryDataVersion:                 "QUERY_DATA_VERSION",
	SendReplyMessage:                 "SEND_REPLY_MESSAGE",
	SendReplyMessageV2:               "SEND_REPLY_MESSAGE_V2",
	PushReplyMessageToClient:         "PUSH_REPLY_MESSAGE_TO_CLIENT",
	LitePullMessage:                  "LITE_PULL_MESSAGE",
	QueryAssignment:                  "QUERY_ASSIGNMENT",
	SetMessageRequestMode:            "SET_MESSAGE_REQUEST_MODE",
	BrokerHeartbeat:                  "BROKER_HEARTBEAT",
	GetBrokerHAStatus:                "GET_BROKER_HA_STATUS",
	PromoteBroker:                    "STRATAMQ_PROMOTE_BROKER",
	DemoteBroker:                     "STRATAMQ_DEMOTE_BROKER",
	DLQList:                          "STRATAMQ_DLQ_LIST",
	DLQResend:                        "STRATAMQ_DLQ_RESEND",
	TopicRetention:                   "STRATAMQ_TOPIC_RETENTION",
	TierStatus:                       "STRATAMQ_TIER_STATUS",
	PopMessage:                       "POP_MESSAGE",
	AckMessage:                       "ACK_MESSAGE",
	ChangeMessageInvisibleTime:       "CHANGE_MESSAGE_INVISIBLETIME",
}

// String returns RocketMQ's name for the code (SEND_MESSAGE), or
// RequestCode(N) for codes outside the table.
func (c RequestCode) String() string { return codeName(requestCodeNames, "RequestCode", c) }

// Retriable reports whether a request with this code may be sent again
// after a transport error or a timeout without changing the outcome: reads,
// and writes that are idempotent (registrations, heartbeats, offset
// commits, topic create/delete). Sends, send-backs and transaction ends are
// not: a retry may store a message twice.
func (c RequestCode) Retriable() bool {
	switch c {
	case SendMessage, SendMessageV2, SendBatchMessage, SendReplyMessage, SendReplyMessageV2,
		ConsumerSendMsgBack, EndTransaction, PullMessage, LitePullMessage, PopMessage,
		AckMessage, ChangeMessageInvisibleTime, PushReplyMessageToClient, ConsumeMessageDirectly,
		PromoteBroker, DemoteBroker, DLQResend:
		return false
	}
	_, known := requestCodeNames[c]
	return known
}

// ResponseCode is the code of a response command (RocketMQ's ResponseCode).
type ResponseCode int32

// Response codes (docs/rocketmq-protocol.md §2.3).
const (
	Success                    ResponseCode = 0
	SystemError                ResponseCode = 1
	SystemBusy                 ResponseCode = 2
	RequestCodeNotSupported    ResponseCode = 3
	TransactionFailed          ResponseCode = 4
	FlushDiskTimeout           ResponseCode = 10
	SlaveNotAvailable          ResponseCode = 11
	FlushSlaveTimeout          ResponseCode = 12
	MessageIllegal             ResponseCode = 13
	ServiceNotAvailable        ResponseCode = 14
	VersionNotSupported        ResponseCode = 15
	NoPermission               ResponseCode = 16
	TopicNotExist              ResponseCode = 17
	TopicExistAlready          ResponseCode = 18
	PullNotFound               ResponseCode = 19
	PullRetryImmediately       ResponseCode = 20
	PullOffsetMoved            ResponseCode = 21
	QueryNotFound              ResponseCode = 22
	SubscriptionParseFailed    ResponseCode = 23
	SubscriptionNotExist       ResponseCode = 24
	SubscriptionNotLatest      ResponseCode = 25
	SubscriptionGroupNotExist  ResponseCode = 26
	FilterDataNotExist         ResponseCode = 27
	FilterDataNotLatest        ResponseCode = 28
	InvalidParameter           ResponseCode = 29
	TransactionShouldCommit    ResponseCode = 200
	TransactionShouldRollback  ResponseCode = 201
	TransactionStateUnknow     ResponseCode = 202
	TransactionStateGroupWrong ResponseCode = 203
	NoBuyerID                  ResponseCode = 204
	NotInCurrentUnit           ResponseCode = 205
	ConsumerNotOnline          ResponseCode = 206
	ConsumeMsgTimeout          ResponseCode = 207
	NoMessage                  ResponseCode = 208
	PollingFull                ResponseCode = 209
	PollingTimeout             ResponseCode = 210
	BrokerNotExist             ResponseCode = 211
	FlowControl                ResponseCode = 215
	NotLeaderForQueue          ResponseCode = 501
	IllegalOperation           ResponseCode = 604
	GoAway                     ResponseCode = 1500
)

var responseCodeNames = map[ResponseCode]string{
	Success:                    "SUCCESS",
	SystemError:                "SYSTEM_ERROR",
	SystemBusy:                 "SYSTEM_BUSY",
	RequestCodeNotSupported:    "REQUEST_CODE_NOT_SUPPORTED",
	TransactionFailed:          "TRANSACTION_FAILED",
	FlushDiskTimeout:           "FLUSH_DISK_TIMEOUT",
	SlaveNotAvailable:          "SLAVE_NOT_AVAILABLE",
	FlushSlaveTimeout:          "FLUSH_SLAVE_TIMEOUT",
	MessageIllegal:             "MESSAGE_ILLEGAL",
	ServiceNotAvailable:        "SERVICE_NOT_AVAILABLE",
	VersionNotSupported:        "VERSION_NOT_SUPPORTED",
	NoPermission:               "NO_PERMISSION",
	TopicNotExist:              "TOPIC_NOT_EXIST",
	TopicExistAlready:          "TOPIC_EXIST_ALREADY",
	PullNotFound:               "PULL_NOT_FOUND",
	PullRetryImmediately:       "PULL_RETRY_IMMEDIATELY",
	PullOffsetMoved:            "PULL_OFFSET_MOVED",
	QueryNotFound:              "QUERY_NOT_FOUND",
	SubscriptionParseFailed:    "SUBSCRIPTION_PARSE_FAILED",
	SubscriptionNotExist:       "SUBSCRIPTION_NOT_EXIST",
	SubscriptionNotLatest:      "SUBSCRIPTION_NOT_LATEST",
	SubscriptionGroupNotExist:  "SUBSCRIPTION_GROUP_NOT_EXIST",
	FilterDataNotExist:         "FILTER_DATA_NOT_EXIST",
	FilterDataNotLatest:        "FILTER_DATA_NOT_LATEST",
	InvalidParameter:           "INVALID_PARAMETER",
	TransactionShouldCommit:    "TRANSACTION_SHOULD_COMMIT",
	TransactionShouldRollback:  "TRANSACTION_SHOULD_ROLLBACK",
	TransactionStateUnknow:     "TRANSACTION_STATE_UNKNOW",
	TransactionStateGroupWrong: "TRANSACTION_STATE_GROUP_WRONG",
	NoBuyerID:                  "NO_BUYER_ID",
	NotInCurrentUnit:           "NOT_IN_CURRENT_UNIT",
	ConsumerNotOnline:          "CONSUMER_NOT_ONLINE",
	ConsumeMsgTimeout:          "CONSUME_MSG_TIMEOUT",
	NoMessage:                  "NO_MESSAGE",
	PollingFull:                "POLLING_FULL",
	PollingTimeout:             "POLLING_TIMEOUT",
	BrokerNotExist:             "BROKER_NOT_EXIST",
	FlowControl:                "FLOW_CONTROL",
	NotLeaderForQueue:          "NOT_LEADER_FOR_QUEUE",
	IllegalOperation:           "ILLEGAL_OPERATION",
	GoAway:                     "GO_AWAY",
}

// String returns RocketMQ's name for the code (SYSTEM_BUSY), or
// ResponseCode(N) for codes outside the table.
func (c ResponseCode) String() string { return codeName(responseCodeNames, "ResponseCode", c) }

// codeName is c's name in names, or typeName(N) for a code outside it.
func codeName[C ~int32](names map[C]string, typeName string, c C) string {
	if n, ok := names[c]; ok {
		return n
	}
	return typeName + "(" + strconv.Itoa(int(c)) + ")"
}

// Retriable reports whether the condition is transient, so that the same
// request may succeed if sent again later or to another broker. This is the
// one place that reasoning lives:
//   - SystemError, ServiceNotAvailable, NoPermission, TopicNotExist: the
//     codes client-go retries a send on (another broker may accept it; a
//     topic may be about to be created).
//   - SystemBusy, FlowControl, PollingFull: back-pressure; retry after a pause.
//   - PullRetryImmediately: the pull matched nothing; pull again.
//   - NotLeaderForQueue, GoAway: the broker moved or is going away.
//
// Everything else is final for that request (including the three "stored
// but degraded" send codes 10/11/12, which must not be re-sent).
func (c ResponseCode) Retriable() bool {
	switch c {
	case SystemError, SystemBusy, ServiceNotAvailable, NoPermission, TopicNotExist,
		FlowControl, PollingFull, PullRetryImmediately, NotLeaderForQueue, GoAway:
		return true
	}
	return false
}
