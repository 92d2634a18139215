package broker

import (
	"context"

	"github.com/stratamq/stratamq/remoting"
)

// handlerTable maps each supported request code to its handler; each lives
// in rcNNN_<name>.go.
func (b *Broker) handlerTable() map[remoting.RequestCode]handlerFunc {
	return map[remoting.RequestCode]handlerFunc{
		remoting.SendMessage:                      b.sendMessage,
		remoting.SendMessageV2:                    b.sendMessage,
		remoting.SendBatchMessage:                 b.sendBatchMessage,
		remoting.PullMessage:                      b.pullMessage,
		remoting.QueryConsumerOffset:              b.queryConsumerOffset,
		remoting.UpdateConsumerOffset:             b.updateConsumerOffset,
		remoting.UpdateAndCreateTopic:             b.updateAndCreateTopic,
		remoting.GetAllTopicConfig:                b.getAllTopicConfig,
		remoting.SearchOffsetByTimestamp:          b.searchOffsetByTimestamp,
		remoting.GetMaxOffset:                     b.getMaxOffset,
		remoting.GetMinOffset:                     b.getMinOffset,
		remoting.GetEarliestMsgStoretime:          b.getEarliestMsgStoretime,
		remoting.ViewMessageByID:                  b.viewMessageByID,
		remoting.QueryMessage:                     b.queryMessage,
		remoting.HeartBeat:                        b.heartBeat,
		remoting.CheckClientConfig:                b.checkClientConfig,
		remoting.UnregisterClient:                 b.unregisterClient,
		remoting.ConsumerSendMsgBack:              b.consumerSendMsgBack,
		remoting.EndTransaction:                   b.endTransaction,
		remoting.GetConsumerListByGroup:           b.getConsumerListByGroup,
		remoting.LockBatchMQ:                      b.lockBatchMQ,
		remoting.UnlockBatchMQ:                    b.unlockBatchMQ,
		remoting.GetAllConsumerOffset:             b.getAllConsumerOffset,
		remoting.UpdateAndCreateSubscriptionGroup: b.updateAndCreateSubscriptionGroup,
		remoting.GetAllSubscriptionGroupConfig:    b.getAllSubscriptionGroupConfig,
		remoting.DeleteTopicInBroker:              b.deleteTopicInBroker,
		remoting.GetBrokerHAStatus:                b.getBrokerHAStatus,
		remoting.PromoteBroker:                    b.promoteBroker,
		remoting.DemoteBroker:                     b.demoteBroker,
		remoting.DLQList:                          b.dlqList,
		remoting.DLQResend:                        b.dlqResend,
		remoting.TopicRetention:                   b.topicRetentionStatus,
		remoting.TierStatus:                       b.tierStatus,
		remoting.GetConsumerConnectionList:        b.getConsumerConnectionList,
		remoting.DeleteSubscriptionGroup:          b.deleteSubscriptionGroup,
		remoting.AuthCreateUser:                   b.authCreateUser, // auth2.go
		remoting.AuthUpdateUser:                   b.authUpdateUser,
		remoting.AuthDeleteUser:                   b.authDeleteUser,
		remoting.AuthGetUser:                      b.authGetUser,
		remoting.AuthListUser:                     b.authListUser,
		remoting.AuthCreateAcl:                    b.authCreateAcl,
		remoting.AuthUpdateAcl:                    b.authUpdateAcl,
		remoting.AuthDeleteAcl:                    b.authDeleteAcl,
		remoting.AuthGetAcl:                       b.authGetAcl,
		remoting.AuthListAcl:                      b.authListAcl,
		remoting.GetBrokerConfig:                  b.getBrokerConfig,
		remoting.GetBrokerRuntimeInfo:             b.getBrokerRuntimeInfo,
		remoting.InvokeBrokerToResetOffset:        b.invokeBrokerToResetOffset,
		remoting.InvokeBrokerToGetConsumerStatus:  b.invokeBrokerToGetConsumerStatus,
	}
}

// classify picks the worker pool of a request: sends, pulls, heartbeats and
// admin each have their own, so a flood of one cannot starve the others.
func classify(code remoting.RequestCode) remoting.PoolClass {
	switch code {
	case remoting.SendMessage, remoting.SendMessageV2, remoting.SendBatchMessage:
		return remoting.PoolSend
	case remoting.ConsumerSendMsgBack:
		// It may read the original from the bucket: never inline.
		return remoting.PoolDefault
	case remoting.PullMessage:
		return remoting.PoolPull
	case remoting.HeartBeat, remoting.UnregisterClient, remoting.CheckClientConfig:
		return remoting.PoolHeartbeat
	case remoting.UpdateAndCreateTopic, remoting.DeleteTopicInBroker, remoting.GetAllTopicConfig,
		remoting.UpdateAndCreateSubscriptionGroup, remoting.GetAllSubscriptionGroupConfig, remoting.GetAllConsumerOffset,
		remoting.GetBrokerHAStatus, remoting.PromoteBroker, remoting.DemoteBroker, remoting.DLQList, remoting.DLQResend,
		remoting.InvokeBrokerToResetOffset, remoting.InvokeBrokerToGetConsumerStatus, remoting.TopicRetention, remoting.TierStatus,
		remoting.GetConsumerConnectionList, remoting.DeleteSubscriptionGroup, remoting.GetBrokerConfig, remoting.GetBrokerRuntimeInfo,
		remoting.AuthCreateUser, remoting.AuthUpdateUser, remoting.AuthDeleteUser, remoting.AuthGetUser, remoting.AuthListUser,
		remoting.AuthCreateAcl, remoting.AuthUpdateAcl, remoting.AuthDeleteAcl, remoting.AuthGetAcl, remoting.AuthListAcl:
		return remoting.PoolAdmin
	}
	return remoting.PoolDefault
}

// defaultPools sizes the worker pools. Send workers block in Put for a group
// commit in sync mode, so there are enough of them for 64+ concurrent
// producers to share one fdatasync; pulls never block a worker (long polls
// are parked in pullHold).
//
// A send never waits for the disk on a worker: with flush=async Put returns
// once the record is in the page cache, and with flush=sync the handler
// returns at once and the store acknowledges after the group commit
// (storeAndAck). So sends run inline on the connection's reader: no
// goroutine hand-off per message, and a connection's sends are stored in
// the order they arrived.
func defaultPools() map[remoting.PoolClass]remoting.PoolConfig {
	return map[remoting.PoolClass]remoting.PoolConfig{
		remoting.PoolSend:      {Inline: true},
		remoting.PoolPull:      {Workers: 16, Queue: 10000},
		remoting.PoolHeartbeat: {Workers: 4, Queue: 5000},
		remoting.PoolAdmin:     {Workers: 4, Queue: 1000},
		remoting.PoolDefault:   {Workers: 8, Queue: 10000},
	}
}

// ServeRemoting implements remoting.Handler.
func (b *Broker) ServeRemoting(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	h, ok := b.handlers[remoting.RequestCode(req.Code)]
	if !ok {
		return remoting.NotSupported(req)
	}
	if resp := b.checkACL(c, req); resp != nil {
		resp.Version = Version
		return resp
	}
	resp := h(ctx, c, req)
	if resp != nil {
		resp.Version = Version
	}
	return resp
}

// RequestHints implements remoting.RequestHinter. The send handlers read
// their header with Command.Ext (no ExtFields map) and keep nothing of
// req.Body once they return: store.Put copies each body into the log
// before it returns, and neither the store (OnDispatch gets topic, queue,
// offset and tags code) nor the metrics keep it. So their frame buffers
// are recycled. Every other handler gets the map and its own buffer.
func (b *Broker) RequestHints(code remoting.RequestCode) (extMap, reuseFrame bool) {
	switch code {
	case remoting.SendMessage, remoting.SendMessageV2, remoting.SendBatchMessage:
		return false, true
	}
	return true, false
}

// errResponse builds a response with code and remark.
func errResponse(req *remoting.Command, code remoting.ResponseCode, remark string) *remoting.Command {
	return remoting.NewResponse(req, code, remark)
}
