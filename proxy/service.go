package proxy

import (
	"context"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stratamq/stratamq/proxy/apiv2"
)

// service implements apiv2.MessagingServiceServer. Each RPC is a method in
// a file of its own (rpc_*.go); an RPC without one answers gRPC
// Unimplemented through the embedded stub, at once.
type service struct {
	apiv2.UnimplementedMessagingServiceServer
	s *Server

	// sessions are the clients with a Telemetry stream open, by client id
	// (rpc_telemetry.go).
	sessions sessions
	// pending are the server's telemetry questions waiting for answers
	// (telemetry_ask.go).
	pending pendingAnswers
	// renew keeps auto_renew receipt handles invisible (renew.go).
	renew *renewer
	// done is closed by shutdown: streams end.
	done     chan struct{}
	doneOnce sync.Once
}

func newService(s *Server) *service {
	svc := &service{s: s, done: make(chan struct{})}
	svc.sessions.m = map[string]*session{}
	svc.renew = newRenewer(svc)
	return svc
}

func (svc *service) shutdown() { svc.doneOnce.Do(func() { close(svc.done) }) }

// rpcName is the method name of a full gRPC method
// ("/apache.rocketmq.v2.MessagingService/SendMessage" → "SendMessage").
func rpcName(full string) string {
	return full[strings.LastIndexByte(full, '/')+1:]
}

// statusCoder is a response with a v2 status (every unary response of the
// service has one).
type statusCoder interface{ GetStatus() *apiv2.Status }

// unaryInterceptor counts each call by method and outcome (the v2 code of
// the response's status, or the gRPC code of an error).
func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	if m := s.cfg.Metrics; m != nil {
		code := "OK"
		switch {
		case err != nil:
			code = status.Code(err).String()
		default:
			if sc, ok := resp.(statusCoder); ok && sc.GetStatus() != nil {
				code = sc.GetStatus().GetCode().String()
			}
		}
		m.GRPCRequest(rpcName(info.FullMethod), code)
	}
	return resp, err
}

// streamInterceptor counts each stream by method once it ends.
func (s *Server) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	err := h(srv, ss)
	if m := s.cfg.Metrics; m != nil {
		m.GRPCRequest(rpcName(info.FullMethod), status.Code(err).String())
	}
	return err
}

// unimplemented is the error of an RPC the server does not serve.
func unimplemented(method string) error {
	return status.Errorf(codes.Unimplemented, "StrataMQ does not implement %s", method)
}

// resourceName is a Resource's name with its namespace, as RocketMQ's
// proxy forms it (namespace%name); empty namespace: the name alone.
func resourceName(r *apiv2.Resource) string {
	if r == nil {
		return ""
	}
	if ns := r.GetResourceNamespace(); ns != "" {
		return ns + "%" + r.GetName()
	}
	return r.GetName()
}

// SyncLiteSubscription: lite topics are not supported.
func (svc *service) SyncLiteSubscription(ctx context.Context, _ *apiv2.SyncLiteSubscriptionRequest) (*apiv2.SyncLiteSubscriptionResponse, error) {
	return &apiv2.SyncLiteSubscriptionResponse{Status: &apiv2.Status{Code: apiv2.Code_UNSUPPORTED,
		Message: "StrataMQ does not support lite topics"}}, nil
}
