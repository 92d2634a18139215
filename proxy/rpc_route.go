package proxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"

	"github.com/stratamq/stratamq/proxy/apiv2"
	"github.com/stratamq/stratamq/remoting"
)

// RocketMQ's permission bits.
const (
	permRead  = 1 << 2
	permWrite = 1 << 1
)

// QueryRoute answers a topic's queues, all on this endpoint: the clients
// then send to and receive from this address, whatever the remoting
// routes say. Queues that are both read and write are READ_WRITE; the
// extra ones of a topic with more read than write queues (or the
// reverse) are READ or WRITE only. Any signed caller may read an
// existing topic's route (as the name servers' routes are open); an
// unknown topic is created (with the broker's auto-create policy) only
// for a caller with PUB on it, as a first send over remoting is: another
// gets TOPIC_NOT_FOUND saying so.
func (svc *service) QueryRoute(ctx context.Context, req *apiv2.QueryRouteRequest) (*apiv2.QueryRouteResponse, error) {
	b, err := svc.s.backend()
	if err != nil {
		return &apiv2.QueryRouteResponse{Status: statusOf(err)}, nil
	}
	topic := resourceName(req.GetTopic())
	if topic == "" {
		return &apiv2.QueryRouteResponse{Status: statusOf(bad(apiv2.Code_ILLEGAL_TOPIC, "the topic is empty"))}, nil
	}
	if err := svc.s.authAny(ctx, b); err != nil {
		return &apiv2.QueryRouteResponse{Status: statusOf(err)}, nil
	}
	pubErr := svc.s.authTopic(ctx, b, topic, true)
	r, err := b.Route(ctx, topic, pubErr == nil)
	var pe *Error
	if pubErr != nil && errors.As(err, &pe) && pe.Code == remoting.TopicNotExist {
		err = bad(apiv2.Code_TOPIC_NOT_FOUND, "topic %s does not exist; a route query creates it only for an account with PUB on it: %s", topic, statusOf(pubErr).GetMessage())
	}
	if err != nil {
		return &apiv2.QueryRouteResponse{Status: statusOf(err)}, nil
	}
	return &apiv2.QueryRouteResponse{Status: okStatus(), MessageQueues: svc.queues(b, req.GetTopic(), r, svc.endpointsFor(b, req.GetEndpoints()))}, nil
}

// endpointsFor is the address a route hands the client: the one the
// client named as its access point (it reached this endpoint through it:
// a load balancer's, a DNS name), else Config.Advertise, else the broker's
// advertised host with this server's port.
func (svc *service) endpointsFor(b Backend, asked *apiv2.Endpoints) *apiv2.Endpoints {
	if len(asked.GetAddresses()) > 0 {
		out := &apiv2.Endpoints{Scheme: asked.GetScheme()}
		for _, a := range asked.GetAddresses() {
			if a.GetHost() != "" && a.GetPort() > 0 && a.GetPort() < 65536 {
				out.Addresses = append(out.Addresses, &apiv2.Address{Host: a.GetHost(), Port: a.GetPort()})
			}
		}
		if len(out.Addresses) > 0 {
			return out
		}
	}
	addr := svc.s.cfg.Advertise
	if addr == "" {
		_, port, _ := net.SplitHostPort(svc.s.ln.Addr().String())
		host, _, err := net.SplitHostPort(b.AdvertisedAddr())
		if err != nil || host == "" {
			host = "127.0.0.1"
		}
		addr = net.JoinHostPort(host, port)
	}
	return endpointsOf(addr)
}

// queues are r's message queues at ep.
func (svc *service) queues(b Backend, topic *apiv2.Resource, r Route, ep *apiv2.Endpoints) []*apiv2.MessageQueue {
	broker := &apiv2.Broker{Name: b.BrokerName(), Id: 0, Endpoints: ep}
	n := max(r.ReadQueues, r.WriteQueues)
	out := make([]*apiv2.MessageQueue, 0, n)
	for i := range n {
		read := i < r.ReadQueues && r.Perm&permRead != 0
		write := i < r.WriteQueues && r.Perm&permWrite != 0
		p := apiv2.Permission_NONE
		switch {
		case read && write:
			p = apiv2.Permission_READ_WRITE
		case read:
			p = apiv2.Permission_READ
		case write:
			p = apiv2.Permission_WRITE
		}
		out = append(out, &apiv2.MessageQueue{
			Topic: &apiv2.Resource{ResourceNamespace: topic.GetResourceNamespace(), Name: topic.GetName()},
			Id:    i, Permission: p, Broker: broker, AcceptMessageTypes: acceptTypes(r.MessageType),
		})
	}
	return out
}

// endpointsOf is a host:port as v2 Endpoints.
func endpointsOf(addr string) *apiv2.Endpoints {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return &apiv2.Endpoints{Scheme: apiv2.AddressScheme_DOMAIN_NAME, Addresses: []*apiv2.Address{{Host: addr}}}
	}
	p, _ := strconv.Atoi(port)
	scheme := apiv2.AddressScheme_DOMAIN_NAME
	if a, err := netip.ParseAddr(host); err == nil {
		scheme = apiv2.AddressScheme_IPv4
		if a.Is6() && !a.Is4In6() {
			scheme = apiv2.AddressScheme_IPv6
		}
	}
	return &apiv2.Endpoints{Scheme: scheme, Addresses: []*apiv2.Address{{Host: host, Port: int32(p)}}}
}

// Heartbeat keeps a client known. Producers and consumers alike need only
// a valid identity here; a client's liveness is its Telemetry stream.
func (svc *service) Heartbeat(ctx context.Context, req *apiv2.HeartbeatRequest) (*apiv2.HeartbeatResponse, error) {
	b, err := svc.s.backend()
	if err == nil {
		err = svc.s.authAny(ctx, b)
	}
	if err == nil && clientID(ctx) == "" {
		err = bad(apiv2.Code_CLIENT_ID_REQUIRED, "the %s header is missing", hdrClientID)
	}
	if err == nil {
		err = svc.sessions.touch(svc.s.callerOf(ctx, b), clientID(ctx))
	}
	return &apiv2.HeartbeatResponse{Status: statusOf(err)}, nil
}

// NotifyClientTermination forgets the client: its transaction checks go
// to another producer from now on, and its auto_renew handles are renewed
// no more. Only the session's owner may say so: the account and the
// connection that opened the client's Telemetry stream (FORBIDDEN
// otherwise).
func (svc *service) NotifyClientTermination(ctx context.Context, req *apiv2.NotifyClientTerminationRequest) (*apiv2.NotifyClientTerminationResponse, error) {
	b, err := svc.s.backend()
	if err == nil {
		err = svc.s.authAny(ctx, b)
	}
	if err == nil {
		var dropped bool
		if dropped, err = svc.sessions.terminate(svc.s.callerOf(ctx, b), clientID(ctx)); dropped {
			svc.renew.dropClient(clientID(ctx))
		}
	}
	return &apiv2.NotifyClientTerminationResponse{Status: statusOf(err)}, nil
}

// endpoints is this server's address as a route names it when the client
// gave no access point (endpointsFor with none).
func (svc *service) endpoints() *apiv2.Endpoints {
	b, err := svc.s.backend()
	if err != nil {
		return endpointsOf(svc.s.ln.Addr().String())
	}
	return svc.endpointsFor(b, nil)
}
