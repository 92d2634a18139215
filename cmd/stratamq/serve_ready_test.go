package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/stratamq/stratamq/namesrv"
	"github.com/stratamq/stratamq/remoting"
)

// TestServeHoldsRoutesUntilItsBrokerRegistered: serve's name server port
// opens before its broker has registered (here the broker is held back
// until the test lets it go). A route query that comes in that moment is
// held, not answered TOPIC_NOT_EXIST, and is answered with the route once
// the broker registers; an official push consumer started the moment the
// port accepts starts (client-go gives up at once on "route info not
// found").
func TestServeHoldsRoutesUntilItsBrokerRegistered(t *testing.T) {
	s := startServe(t, t.TempDir(), nil)
	topic := uniqueName(t, "Held")
	s.createTopic(topic, 2)
	s.stop()

	release := make(chan struct{})
	testHookBeforeBroker = func() { <-release }
	defer func() { testHookBeforeBroker = nil }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve"}, s.env, io.Discard, s.logs) }()
	defer func() { cancel(); <-done }()
	released := false
	defer func() { // before serve is stopped: it waits in the hook
		if !released {
			close(release)
		}
	}()
	waitFor(t, 20*time.Second, "the name server port to accept", func() bool {
		c, err := net.DialTimeout("tcp", s.nsAddr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	type answer struct {
		code int32
		body int
		err  error
	}
	raw := make(chan answer, 1)
	go func() {
		cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
		defer cl.Close()
		qctx, qcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer qcancel()
		resp, err := cl.Invoke(qctx, s.nsAddr, remoting.NewRequest(remoting.GetRouteinfoByTopic, map[string]string{"topic": topic}, nil))
		if err != nil {
			raw <- answer{err: err}
			return
		}
		raw <- answer{code: resp.Code, body: len(resp.Body)}
	}()
	started := make(chan error, 1)
	var consumer rocketmq.PushConsumer
	var consumed atomic.Int64
	go func() {
		c, err := rocketmq.NewPushConsumer(rmqconsumer.WithNsResolver(primitive.NewPassthroughResolver([]string{s.nsAddr})),
			rmqconsumer.WithGroupName(uniqueName(t, "G")), rmqconsumer.WithInstance("held"),
			rmqconsumer.WithConsumeFromWhere(rmqconsumer.ConsumeFromFirstOffset), noSpanFlowControl)
		if err == nil {
			err = c.Subscribe(topic, rmqconsumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (rmqconsumer.ConsumeResult, error) {
				for range msgs {
					consumed.Add(1)
				}
				return rmqconsumer.ConsumeSuccess, nil
			})
		}
		if err == nil {
			err = c.Start()
			consumer = c
		}
		started <- err
	}()
	// Whatever came in before the broker registered must not have been
	// answered "topic not exist".
	select {
	case a := <-raw:
		t.Fatalf("a route query before the broker registered was answered at once: code %d, %v", a.code, a.err)
	case err := <-started:
		t.Fatalf("a consumer started before the broker registered: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	released = true
	close(release)
	a := <-raw
	if a.err != nil || a.code != int32(remoting.Success) || a.body == 0 {
		t.Fatalf("the held route query: code %d, %d body bytes, %v; want its route", a.code, a.body, a.err)
	}
	if err := <-started; err != nil {
		t.Fatalf("a consumer started the moment the name server port opened: %v", err)
	}
	// The consumer that started works: it receives a message sent now.
	// Waiting for it also lets the client's first rebalance finish before
	// Shutdown: rocketmq-client-go's Shutdown writes its closed flag
	// without synchronising with that rebalance, which reads it (-race).
	p := newClientProducer(t, s.nsAddr)
	if _, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte("after-start"))); err != nil {
		t.Fatalf("send to the held topic: %v", err)
	}
	waitFor(t, 30*time.Second, "the started consumer to receive a message", func() bool { return consumed.Load() > 0 })
	_ = consumer.Shutdown()
}

// TestServeReadyzPromisesARoute: /readyz answers 200 only once the broker
// is registered with its name server and routed by it. Here serve's broker
// registers with a name server that is not up yet: /readyz says 503 and
// why; once that name server runs, /readyz turns 200 and at that moment
// the name server routes the broker's topics.
func TestServeReadyzPromisesARoute(t *testing.T) {
	t.Parallel()
	nsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s := &testServe{t: t, dir: t.TempDir(), logs: &syncBuffer{}}
	s.nsAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s.brokAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s.env = map[string]string{
		"STRATAMQ_DATA_DIR":       s.dir,
		"STRATAMQ_NAMESRV_LISTEN": s.nsAddr,
		"STRATAMQ_NAMESRV":        nsAddr, // not up yet
		"STRATAMQ_LISTEN":         s.brokAddr,
		"STRATAMQ_HTTP_LISTEN":    httpAddr,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve"}, s.env, io.Discard, s.logs) }()
	defer func() { cancel(); <-done }()

	cl := &http.Client{Timeout: 10 * time.Second}
	readyz := func() (int, string) {
		resp, err := cl.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var body string
	waitFor(t, 30*time.Second, "/readyz to answer", func() bool {
		var code int
		code, body = readyz()
		if code == http.StatusOK {
			t.Fatalf("/readyz is 200 while the broker's only name server is down: %s", body)
		}
		return code == http.StatusServiceUnavailable && strings.Contains(body, "name server")
	})
	// The broker is open and serving; it cannot register.
	if _, ok := ask(s.brokAddr, remoting.NewRequest(remoting.GetBrokerConfig, nil, nil), 5*time.Second); !ok {
		t.Fatal("the broker does not answer")
	}
	if code, body := readyz(); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with the broker unregistered: %d %s", code, body)
	}

	ns := namesrv.New(namesrv.Config{Logger: slog.New(slog.DiscardHandler)})
	srv := remoting.NewServer(remoting.ServerConfig{Addr: nsAddr, Logger: slog.New(slog.DiscardHandler), OnClose: ns.OnConnClose}, ns)
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	nsCtx, nsCancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(nsCtx) }()
	defer func() {
		sctx, sc := context.WithTimeout(context.Background(), 5*time.Second)
		defer sc()
		_ = srv.Shutdown(sctx)
		nsCancel()
		<-served
	}()
	waitFor(t, 60*time.Second, "/readyz 200 once the name server is up", func() bool {
		code, _ := readyz()
		return code == http.StatusOK
	})
	if !routeExists(nsAddr, "TBW102") {
		t.Fatal("/readyz is 200 but the name server has no route for the broker's topics")
	}
}
