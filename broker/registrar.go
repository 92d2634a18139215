package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/stratamq/stratamq/remoting"
)

// requestRegister asks the registrar to register now (a topic changed).
func (b *Broker) requestRegister() {
	select {
	case b.registerNow <- struct{}{}:
	default:
	}
}

// registrar registers with every name server at start, every
// RegisterInterval, and whenever a topic is created or deleted.
func (b *Broker) registrar(ctx context.Context) {
	if len(b.cfg.NameServers()) == 0 {
		return
	}
	t := time.NewTicker(b.cfg.RegisterInterval)
	defer t.Stop()
	// A slave that learns its master from the name servers asks again
	// every STRATAMQ_HA_SYNC_INTERVAL until an answer names the master.
	// A registration a name server refused (NO_PERMISSION: the ACL, or
	// the name still held by a live registration of an old broker) is
	// retried at that pace too.
	//
	// A master whose bucket lease may have lapsed (it cannot renew it: cut
	// off from the bucket, or another broker took it) refuses writes; it
	// also leaves the routes: it unregisters and registers no more until
	// the lease is renewed. The name servers keep a live registration of
	// a broker name and id from being taken over from another address,
	// so the slave that takes the lease needs the old master gone from
	// them to be routed as master. The lease is looked at every retry tick.
	retry := time.NewTicker(min(b.cfg.RegisterInterval, b.cfg.HASyncInterval))
	defer retry.Stop()
	lapsed := false // unregistered for a lapsed lease
	refused := false
	register := func() {
		if b.leaseLapsed() {
			if !lapsed {
				b.log.Warn("the bucket lease may have lapsed: unregistering from the name servers until it is renewed")
				b.registeredWith.Store(nil)
				b.unregisterAll(ctx)
				lapsed = true
			}
			refused = false
			return
		}
		if lapsed {
			b.log.Info("the bucket lease is renewed: registering with the name servers again")
			lapsed = false
		}
		refused = b.registerAll(ctx)
	}
	register()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-b.registerNow:
		case <-retry.C:
			if f := b.follower(); b.leaseLapsed() == lapsed && !refused && (f == nil || b.cfg.HAMaster != "" || f.NameServerHA() != "") {
				continue
			}
		}
		register()
	}
}

// leaseLapsed reports whether this broker is a master whose bucket lease
// may have lapsed or was taken (durability.Keeper.Writable fails).
func (b *Broker) leaseLapsed() bool {
	if b.cfg.BrokerID != 0 || b.dur == nil || b.dur.Lease() == nil {
		return false
	}
	_, err := b.dur.Writable()
	return err != nil
}

// registerAll registers with every name server; it reports whether one
// refused with NO_PERMISSION.
func (b *Broker) registerAll(ctx context.Context) (refused bool) {
	var reached []string
	defer func() { b.registeredWith.Store(&reached) }()
	body, err := json.Marshal(remoting.RegisterBrokerBody{
		TopicConfigSerializeWrapper: b.topics.Wrapper(),
		FilterServerList:            []string{},
	})
	if err != nil {
		b.log.Error("encode registration", "err", err)
		return false
	}
	// The registration expires after three missed intervals (RocketMQ's
	// brokers leave the name server's 120 s default): a name server keeps
	// a live registration's name from any other address (issue 14), so a
	// master whose machine vanished without closing its conn holds its
	// name, and keeps its promoted slave out of the routes, until then.
	// With the 10 s default that is 30 s, about the bucket lease's TTL,
	// after which the slave takes over anyway.
	h := remoting.RegisterBrokerRequestHeader{
		BrokerName: b.cfg.BrokerName, BrokerAddr: b.advertise, ClusterName: b.cfg.Cluster,
		HAServerAddr: b.haServerAddr(), BrokerID: b.cfg.BrokerID,
		HeartbeatTimeoutMillis: registrationTTL(b.cfg.RegisterInterval).Milliseconds(),
	}
	for _, ns := range b.cfg.NameServers() {
		req := remoting.NewRequest(remoting.RegisterBroker, h.Encode(), body)
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := b.invoke(cctx, ns, req)
		cancel()
		switch {
		case err != nil:
			b.log.Warn("register with name server failed", "namesrv", ns, "err", err)
		case resp.Code != int32(remoting.Success):
			b.log.Warn("name server refused registration", "namesrv", ns, "code", resp.Code, "remark", resp.Remark)
			refused = refused || resp.Code == int32(remoting.NoPermission)
		default:
			reached = append(reached, ns)
			b.log.Debug("registered with name server", "namesrv", ns)
			if f := b.follower(); f != nil {
				// A slave: the answer names its master's addresses.
				var rh remoting.RegisterBrokerResponseHeader
				if err := rh.Decode(resp.ExtFields); err == nil {
					f.Learned(rh)
				}
			}
		}
	}
	return refused
}

func (b *Broker) unregisterAll(ctx context.Context) {
	h := remoting.UnregisterBrokerRequestHeader{BrokerName: b.cfg.BrokerName, BrokerAddr: b.advertise,
		ClusterName: b.cfg.Cluster, BrokerID: b.cfg.BrokerID}
	for _, ns := range b.cfg.NameServers() {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if _, err := b.invoke(cctx, ns, remoting.NewRequest(remoting.UnregisterBroker, h.Encode(), nil)); err != nil {
			b.log.Warn("unregister from name server failed", "namesrv", ns, "err", err)
		}
		cancel()
	}
}

// registrationTTL is how long a name server keeps a registration that is
// not renewed: three register intervals.
func registrationTTL(interval time.Duration) time.Duration { return 3 * interval }

// Ready reports whether clients can use this broker now (serve's /readyz):
// nil once it holds its bucket lease (a master with a bucket), its last
// registration reached a name server, and that name server routes one of
// its topics to it (GET_ROUTEINFO_BY_TOPIC, asked now: TBW102 when it has
// it, else its first topic); else an error saying what is missing. A
// broker without name servers is ready once it holds its lease.
func (b *Broker) Ready(ctx context.Context) error {
	if b.stopping() {
		return errors.New("the broker is shutting down")
	}
	if b.dur != nil && b.dur.Fenced() {
		return errors.New("the broker lost its bucket lease to another broker")
	}
	if b.leaseLapsed() {
		return errors.New("the broker does not hold its bucket lease (yet)")
	}
	if len(b.cfg.NameServers()) == 0 {
		return nil
	}
	reached := b.registeredWith.Load()
	if reached == nil || len(*reached) == 0 {
		return errors.New("the broker has not registered with a name server yet")
	}
	topic := DefaultTopic
	if _, ok := b.topics.Get(topic); !ok {
		names := b.topics.Names()
		if len(names) == 0 {
			return nil // nothing to route
		}
		topic = names[0]
	}
	var why error
	for _, ns := range *reached {
		req := remoting.NewRequest(remoting.GetRouteinfoByTopic, map[string]string{"topic": topic}, nil)
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := b.invoke(cctx, ns, req)
		cancel()
		if err == nil && resp.Code != int32(remoting.Success) {
			err = fmt.Errorf("code %d (%s)", resp.Code, resp.Remark)
		}
		if err == nil {
			route, derr := remoting.DecodeTopicRouteData(resp.Body)
			if derr != nil {
				err = derr
			} else if routesTo(route, b.cfg.BrokerName, b.cfg.BrokerID, b.advertise) {
				return nil
			} else {
				err = errors.New("its route does not name this broker yet")
			}
		}
		why = fmt.Errorf("name server %s, route of topic %s: %w", ns, topic, err)
	}
	return why
}

// routesTo reports whether route names addr as broker id of name.
func routesTo(route *remoting.TopicRouteData, name string, id int64, addr string) bool {
	for _, bd := range route.BrokerDatas {
		if bd.BrokerName == name && bd.BrokerAddrs[id] == addr {
			return true
		}
	}
	return false
}
