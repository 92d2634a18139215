package proxy

import (
	"context"
	"errors"

	"github.com/stratamq/stratamq/proxy/apiv2"
)

// CheckTransaction hands a transaction check to a live gRPC producer of the
// half's topic (its Telemetry stream); false when there is none, or its
// queue is full (the check service asks again next round).
func (s *Server) CheckTransaction(t OrphanedTransaction) bool {
	se := s.svc.sessions.producerOf(t.Topic)
	if se == nil {
		return false
	}
	cmd, err := recoverCommand(t)
	if err != nil {
		s.log.Warn("transaction check not sent: the half message does not convert", "topic", t.Topic, "err", err)
		return false
	}
	return se.offer(cmd)
}

// recoverCommand is the Telemetry command asking a producer about the
// half message of t.
func recoverCommand(t OrphanedTransaction) (*apiv2.TelemetryCommand, error) {
	m, err := MessageFromRecord(&t.Record, t.Topic)
	if err != nil {
		return nil, err
	}
	m.SystemProperties.QueueId = t.QueueID
	return &apiv2.TelemetryCommand{Command: &apiv2.TelemetryCommand_RecoverOrphanedTransactionCommand{
		RecoverOrphanedTransactionCommand: &apiv2.RecoverOrphanedTransactionCommand{
			Message: m, TransactionId: encodeTransactionID(t.PhysOffset, t.HalfOffset)}}}, nil
}

// EndTransaction commits or rolls back the half message its transaction
// id names (the producer got it from SendMessage, or from a transaction
// check). PUB on the half's real topic is needed, checked on the stored
// half (the request's topic is the client's word).
func (svc *service) EndTransaction(ctx context.Context, req *apiv2.EndTransactionRequest) (*apiv2.EndTransactionResponse, error) {
	b, err := svc.s.backend()
	if err != nil {
		return &apiv2.EndTransactionResponse{Status: statusOf(err)}, nil
	}
	topic := resourceName(req.GetTopic())
	phys, half, err := decodeTransactionID(req.GetTransactionId())
	if err == nil {
		switch req.GetResolution() {
		case apiv2.TransactionResolution_COMMIT, apiv2.TransactionResolution_ROLLBACK:
		default:
			// Unknown: nothing to do now; the check service asks again.
			return &apiv2.EndTransactionResponse{Status: okStatus()}, nil
		}
		err = b.EndTransaction(ctx, EndTransaction{
			ProducerGroup: topic, PhysOffset: phys, HalfOffset: half, MsgID: req.GetMessageId(),
			Commit:    req.GetResolution() == apiv2.TransactionResolution_COMMIT,
			FromCheck: req.GetSource() == apiv2.TransactionSource_SOURCE_SERVER_CHECK,
		}, func(real string) error {
			// Neither answer names the half's topic: the transaction id
			// (the offset) is the caller's word.
			if err := svc.s.authTopic(ctx, b, real, true); err != nil {
				var se *statusError
				if errors.As(err, &se) && se.code == apiv2.Code_FORBIDDEN {
					return bad(apiv2.Code_FORBIDDEN, "ACL: no PUB permission on the topic of the transaction's half message")
				}
				return err
			}
			if real != topic {
				return bad(apiv2.Code_BAD_REQUEST, "the transaction is not of topic %s", topic)
			}
			return nil
		})
	}
	return &apiv2.EndTransactionResponse{Status: statusOf(err)}, nil
}
