package proxy_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/proxy"
	"github.com/stratamq/stratamq/proxy/apiv2"
	"github.com/stratamq/stratamq/remoting"
)

// The gRPC endpoint under hostile clients: the generated stubs (and raw
// HTTP/2 frames where a stub would refuse to misbehave) used as an
// attacker would. Each test is short and bounded; -hostile.long runs
// TestGRPCHostileLong, which runs the attacks at scale at once and prints
// memory peaks, connections held and the time to recover.

var (
	hostileLong = flag.Bool("hostile.long", false, "run TestGRPCHostileLong: the gRPC attacks at scale, with memory peaks")
	hostileHeap = flag.Bool("hostile.heap", false, "run TestGRPCHostileHeap: the heap peaks of the gzip bomb and of receivers that never read, at a size the code before the bounds survives")
)

// gzipOf is data gzip-compressed.
func gzipOf(t testing.TB, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	return buf.Bytes()
}

// zeros returns a gzip body that inflates to n zero bytes.
func gzipZeros(t testing.TB, n int) []byte { return gzipOf(t, make([]byte, n)) }

func gzipMsg(topic, id string, body []byte) *apiv2.Message {
	m := textMsg(topic, id, "")
	m.Body = body
	m.SystemProperties.BodyEncoding = apiv2.Encoding_GZIP
	return m
}

// queueEnd is the topic's messages stored, all queues.
func queueEnd(e *env, topic string) int64 {
	var n int64
	for q := int32(0); q < 16; q++ {
		_, mx := e.b.QueueRange(topic, q)
		n += mx
	}
	return n
}

// TestGRPCHostileGzipBomb: a request whose gzip bodies each fit the message
// limit but together inflate past the request bound is refused
// (PAYLOAD_TOO_LARGE) and stores nothing; one body that inflates past the
// message limit is refused before it is inflated (its gzip size field),
// and one whose size field lies is cut at the limit. An honest compressed
// message is stored inflated.
func TestGRPCHostileGzipBomb(t *testing.T) {
	const maxMsg = 256 << 10
	e := startEnv(t, envOpts{cfg: func(c *broker.Config) { c.MaxMessageSize = maxMsg }})
	send := func(msgs ...*apiv2.Message) *apiv2.Status {
		resp, err := e.cli.SendMessage(callCtx(t, "bomber"), &apiv2.SendMessageRequest{Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	// 64 bodies of the message limit each: 16 MiB inflated from ~16 KiB.
	one := gzipZeros(t, maxMsg-1024)
	var batch []*apiv2.Message
	for i := range 64 {
		batch = append(batch, gzipMsg("BombT", fmt.Sprintf("BOMB%02d", i), one))
	}
	st := send(batch...)
	if st.GetCode() != apiv2.Code_PAYLOAD_TOO_LARGE || !strings.Contains(st.GetMessage(), "nothing of the request was stored") {
		t.Fatalf("64 x %d bytes inflated in one request: %v, want PAYLOAD_TOO_LARGE", maxMsg-1024, st)
	}
	if n := queueEnd(e, "BombT"); n != 0 {
		t.Fatalf("the refused bomb stored %d messages", n)
	}
	// One body over the message limit, its size field honest: refused
	// naming the size.
	big := gzipZeros(t, 2<<20)
	st = send(gzipMsg("BombT", "BIG", big))
	if st.GetCode() != apiv2.Code_MESSAGE_BODY_TOO_LARGE || !strings.Contains(st.GetMessage(), strconv.Itoa(2<<20)) {
		t.Fatalf("a body inflating to 2 MiB: %v, want MESSAGE_BODY_TOO_LARGE naming its size", st)
	}
	// Its size field lying (says 100 bytes): cut at the limit.
	liar := slices.Clone(big)
	binary.LittleEndian.PutUint32(liar[len(liar)-4:], 100)
	st = send(gzipMsg("BombT", "LIAR", liar))
	if st.GetCode() != apiv2.Code_MESSAGE_BODY_TOO_LARGE {
		t.Fatalf("a body lying about its size: %v, want MESSAGE_BODY_TOO_LARGE", st)
	}
	if n := queueEnd(e, "BombT"); n != 0 {
		t.Fatalf("refused bodies stored %d messages", n)
	}
	// An honest compressed message is stored, inflated.
	body := bytes.Repeat([]byte("honest "), 10000)
	if st := send(gzipMsg("BombT", "OK1", gzipOf(t, body))); st.GetCode() != apiv2.Code_OK {
		t.Fatalf("an honest gzip message: %v", st)
	}
	if n := queueEnd(e, "BombT"); n != 1 {
		t.Fatalf("stored %d messages, want 1", n)
	}
}

// zlibOf is body zlib-compressed, as a 4.x producer compresses a large
// body (sysFlag bit 0).
func zlibOf(body []byte) []byte {
	var buf bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&buf, zlib.BestCompression)
	zw.Write(body)
	zw.Close()
	return buf.Bytes()
}

// remotingSendZlib stores z as a body sent compressed.
func remotingSendZlib(t testing.TB, b *broker.Broker, topic string, z []byte) {
	t.Helper()
	h := remoting.SendMessageRequestHeader{ProducerGroup: "pg", Topic: topic, DefaultTopic: "TBW102",
		DefaultTopicQueueNums: 1, QueueID: 0, SysFlag: 1, BornTimestamp: time.Now().UnixMilli()}
	cl := remoting.NewClient(remoting.ClientConfig{DialTimeout: time.Second})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.Invoke(ctx, b.Addr().String(), remoting.NewRequest(remoting.SendMessage, h.Encode(), z))
	if err != nil || resp.Code != int32(remoting.Success) {
		t.Fatalf("compressed send: %v %v", resp, err)
	}
}

// stuckClient is a gRPC connection whose streams never read: its windows
// stay at 64 KiB (no BDP growth), so a server's sends to it block.
func stuckClient(t testing.TB, addr string) (*grpc.ClientConn, apiv2.MessagingServiceClient) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, apiv2.NewMessagingServiceClient(conn)
}

func receiveReq(group, topic string, batch int32) *apiv2.ReceiveMessageRequest {
	return &apiv2.ReceiveMessageRequest{Group: res(group), MessageQueue: &apiv2.MessageQueue{Topic: res(topic), Id: -1},
		FilterExpression: &apiv2.FilterExpression{Type: apiv2.FilterType_TAG, Expression: "*"}, BatchSize: batch,
		InvisibleDuration: durationpb.New(time.Minute), LongPollingTimeout: durationpb.New(0)}
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGRPCHostileReceiverNeverReads: receives of stored compressed bodies
// (zlib, 4 MiB each inflated) by clients that never read: the inflated
// bodies held stay within the receive memory bound, the connections of
// the clients that do not read are closed after the send timeout (which
// frees what the transport queued for them), and the memory is given
// back; a client that reads gets the bodies inflated.
func TestGRPCHostileReceiverNeverReads(t *testing.T) {
	// 3 MiB: a reading grpc-go client takes messages up to 4 MiB.
	const inflated, bound = 3 << 20, 2 * 64 << 20
	e := startEnv(t, envOpts{proxy: func(c *proxy.Config) { c.SendTimeout = time.Second; c.ReceiveMemory = bound }})
	z := zlibOf(bytes.Repeat([]byte{'z'}, inflated))
	for range 12 {
		remotingSendZlib(t, e.b, "ZipT", z)
	}
	const stuck = 4
	var conns []*grpc.ClientConn
	for i := range stuck {
		conn, cli := stuckClient(t, e.srv.Addr().String())
		conns = append(conns, conn)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		if _, err := cli.ReceiveMessage(withClient(ctx, fmt.Sprintf("stuck%d", i)), receiveReq(fmt.Sprintf("GZ%d", i), "ZipT", 3)); err != nil {
			t.Fatal(err)
		}
	}
	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if n := e.srv.ReceiveMemory(); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	waitFor(t, 20*time.Second, "the connections of clients that never read to be closed", func() bool {
		for _, c := range conns {
			if s := c.GetState(); s == connectivity.Ready {
				return false
			}
		}
		return true
	})
	waitFor(t, 10*time.Second, "the receive memory to be given back", func() bool { return e.srv.ReceiveMemory() == 0 })
	close(stop)
	wg.Wait()
	if p := peak.Load(); p > bound {
		t.Fatalf("receives held %d bytes of inflated bodies, over the bound %d", p, bound)
	}
	// A client that reads gets the bodies, inflated.
	frames := receiveAll(t, e, receiveReq("GZok", "ZipT", 2))
	n := 0
	for _, f := range frames {
		if m := f.GetMessage(); m != nil {
			if len(m.GetBody()) != inflated || m.GetSystemProperties().GetBodyEncoding() != apiv2.Encoding_IDENTITY {
				t.Fatalf("received a body of %d bytes (%v), want %d inflated", len(m.GetBody()), m.GetSystemProperties().GetBodyEncoding(), inflated)
			}
			n++
		}
	}
	if n != 2 {
		t.Fatalf("a reading client received %d messages, want 2", n)
	}
}

// rawConn dials the endpoint from local IP ip (on loopback).
func rawConn(t testing.TB, addr, ip string) (net.Conn, error) {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return d.Dial("tcp", addr)
}

// closedByServer reports whether c is closed by its peer within d.
func closedByServer(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return err == nil || !(errors.As(err, &ne) && ne.Timeout())
}

// heartbeatFrom makes one Heartbeat over a new connection from local IP ip.
func heartbeatFrom(t testing.TB, addr, ip string, d time.Duration) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
			return d.DialContext(ctx, "tcp", a)
		}))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err = apiv2.NewMessagingServiceClient(conn).Heartbeat(withClient(ctx, "hb-"+ip), &apiv2.HeartbeatRequest{})
	return err
}

// TestGRPCHostileIdleConnections: connections that never speak HTTP/2 are
// capped per IP and in all (one more is closed at accept, and counted),
// and closed after the handshake timeout; a client from another address
// is served meanwhile, and one from the flooding address once the flood
// has timed out; a connection without RPCs is closed after the idle
// timeout.
func TestGRPCHostileIdleConnections(t *testing.T) {
	var refused sync.Map
	e := startEnv(t, envOpts{proxy: func(c *proxy.Config) {
		c.MaxConns, c.MaxConnsPerIP = 12, 4
		c.HandshakeTimeout, c.IdleTimeout = 3*time.Second, time.Second
		c.OnRefuse = func(limit string) {
			n, _ := refused.LoadOrStore(limit, new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
		}
	}})
	e.conn.Close()
	addr := e.srv.Addr().String()
	var flood []net.Conn
	for range 6 {
		c, err := rawConn(t, addr, "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		flood = append(flood, c)
	}
	// Two of the six are past the per-IP cap: closed at once (well before
	// the handshake timeout would close them).
	closed := 0
	for _, c := range flood[4:] {
		if closedByServer(c, time.Second) {
			closed++
		}
	}
	if closed != 2 {
		t.Fatalf("%d of the 2 connections past the per-IP cap were closed", closed)
	}
	if err := heartbeatFrom(t, addr, "127.0.0.2", 5*time.Second); err != nil {
		t.Fatalf("a client from another address during the flood: %v", err)
	}
	waitFor(t, 5*time.Second, "the client's connection to be closed", func() bool { return e.srv.Conns() == 4 })
	// More addresses up to the total cap; one more is closed at accept.
	for i := range 8 {
		c, err := rawConn(t, addr, fmt.Sprintf("127.0.0.%d", 10+i/4))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		flood = append(flood, c)
	}
	waitFor(t, 5*time.Second, "12 connections held", func() bool { return e.srv.Conns() == 12 })
	extra, err := rawConn(t, addr, "127.0.0.20")
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if !closedByServer(extra, time.Second) {
		t.Fatal("a connection past the total cap was not closed")
	}
	for _, limit := range []string{"per_ip", "total"} {
		if n, ok := refused.Load(limit); !ok || n.(*atomic.Int32).Load() == 0 {
			t.Fatalf("no refusal counted for cap %s", limit)
		}
	}
	// The handshake timeout ends the flood.
	waitFor(t, 10*time.Second, "the silent connections to be closed", func() bool { return e.srv.Conns() == 0 })
	// A client from the flooding address is served; its connection,
	// kept open but idle since, is closed after the idle timeout.
	idle, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}}
			return d.DialContext(ctx, "tcp", a)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if _, err := apiv2.NewMessagingServiceClient(idle).Heartbeat(callCtx(t, "idle"), &apiv2.HeartbeatRequest{}); err != nil {
		t.Fatalf("a client from the flooding address after the flood: %v", err)
	}
	if e.srv.Conns() != 1 {
		t.Fatalf("%d connections held, want the client's", e.srv.Conns())
	}
	waitFor(t, 10*time.Second, "the idle connection to be closed", func() bool { return e.srv.Conns() == 0 })
}

func withClient(ctx context.Context, id string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-mq-client-id", id, "x-mq-protocol", "v2")
}

// TestGRPCHostileHugeHeaders: the server advertises its header limit
// (16 KiB) and its stream limit, and does not hold headers past the limit
// from a client that ignores it (raw HTTP/2): a header list over it in
// one small frame (hpack-indexed repeats) resets that stream and the
// connection keeps serving; one that goes on in CONTINUATION frames
// closes the connection (x/net/http2 stops reading such a header block).
// Neither is answered.
func TestGRPCHostileHugeHeaders(t *testing.T) {
	e := startEnv(t, envOpts{})
	type h2 struct {
		c  net.Conn
		bw *bufio.Writer
		fr *http2.Framer
	}
	open := func() h2 {
		c, err := net.Dial("tcp", e.srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		bw := bufio.NewWriter(c)
		bw.WriteString(http2.ClientPreface)
		fr := http2.NewFramer(bw, c)
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		fr.WriteSettings()
		return h2{c, bw, fr}
	}
	// request writes a Heartbeat on stream id with extra headers: repeats
	// of one 1 KiB field (indexed: a byte each after the first), or big
	// distinct fields (not indexed) over CONTINUATION frames.
	request := func(h h2, id uint32, repeats, big int) {
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/apache.rocketmq.v2.MessagingService/Heartbeat"},
			{":authority", "x"}, {"content-type", "application/grpc"}, {"te", "trailers"}, {"x-mq-client-id", "huge"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		for range repeats {
			enc.WriteField(hpack.HeaderField{Name: "x-junk", Value: strings.Repeat("j", 1<<10)})
		}
		for i := range big {
			enc.WriteField(hpack.HeaderField{Name: "x-big-" + strconv.Itoa(i), Value: strings.Repeat("b", 8<<10), Sensitive: true})
		}
		block := hb.Bytes()
		first := min(len(block), 16<<10)
		h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block[:first], EndHeaders: first == len(block)})
		for rest := block[first:]; len(rest) > 0; {
			n := min(len(rest), 16<<10)
			h.fr.WriteContinuation(id, n == len(rest), rest[:n])
			rest = rest[n:]
		}
		h.fr.WriteData(id, true, []byte{0, 0, 0, 0, 0}) // an empty request message
		h.bw.Flush()
	}
	// outcome reads frames until stream id is answered ("answered" with
	// its status), reset ("reset"), or the connection ends ("closed").
	settings := map[http2.SettingID]uint32{}
	outcome := func(h h2, id uint32) string {
		for {
			f, err := h.fr.ReadFrame()
			if err != nil {
				return "closed"
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					f.ForeachSetting(func(s http2.Setting) error { settings[s.ID] = s.Val; return nil })
					h.fr.WriteSettingsAck()
					h.bw.Flush()
				}
			case *http2.RSTStreamFrame:
				if f.StreamID == id {
					return "reset"
				}
			case *http2.MetaHeadersFrame:
				if f.StreamID == id {
					return "answered " + f.PseudoValue("status")
				}
			case *http2.GoAwayFrame:
				return "closed"
			}
		}
	}
	h := open()
	request(h, 1, 40, 0) // 40 KiB of headers in about 1 KiB
	if got := outcome(h, 1); got != "reset" {
		t.Fatalf("40 KiB of headers in one frame: %s, want the stream reset", got)
	}
	if settings[http2.SettingMaxHeaderListSize] != proxy.DefaultMaxHeaderListSize || settings[http2.SettingMaxConcurrentStreams] != proxy.DefaultMaxConcurrentStreams {
		t.Fatalf("settings %v: want MAX_HEADER_LIST_SIZE %d and MAX_CONCURRENT_STREAMS %d", settings,
			proxy.DefaultMaxHeaderListSize, proxy.DefaultMaxConcurrentStreams)
	}
	request(h, 3, 0, 0)
	if got := outcome(h, 3); got != "answered 200" {
		t.Fatalf("a small request after the reset: %s", got)
	}
	h = open()
	request(h, 1, 0, 128) // 1 MiB of headers in CONTINUATION frames
	if got := outcome(h, 1); got != "closed" {
		t.Fatalf("1 MiB of headers: %s, want the connection closed", got)
	}
}

// TestGRPCHostilePopHogs: groups that never ack take messages until they
// are refused (TOO_MANY_REQUESTS), and another group still receives; a
// client past its own bound is refused while another client of the same
// group receives.
func TestGRPCHostilePopHogs(t *testing.T) {
	e := startEnv(t, envOpts{cfg: func(c *broker.Config) {
		c.PopMaxInflight, c.PopMaxInflightPerGroup, c.PopMaxInflightPerClient = 60, 60, 10
	}})
	var msgs []*apiv2.Message
	for i := range 200 {
		msgs = append(msgs, textMsg("HogT", fmt.Sprintf("HOG%03d", i), "m"))
	}
	for i := 0; i < len(msgs); i += 50 {
		resp, err := e.cli.SendMessage(callCtx(t, "p"), &apiv2.SendMessageRequest{Messages: msgs[i : i+50]})
		if err != nil || resp.GetStatus().GetCode() != apiv2.Code_OK {
			t.Fatalf("send: %v %v", resp.GetStatus(), err)
		}
	}
	// receive is one receive: the messages it got and its status.
	receive := func(client, group string) (int, apiv2.Code) {
		st, err := e.cli.ReceiveMessage(callCtx(t, client), receiveReq(group, "HogT", 32))
		if err != nil {
			t.Fatal(err)
		}
		n, code := 0, apiv2.Code_CODE_UNSPECIFIED
		for {
			r, err := st.Recv()
			if err == io.EOF {
				return n, code
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.GetMessage() != nil {
				n++
			}
			if s := r.GetStatus(); s != nil {
				code = s.GetCode()
			}
		}
	}
	// One client past its own bound; its group's other client is served.
	for i := 0; ; i++ {
		n, code := receive("greedy", "GShared")
		if code == apiv2.Code_TOO_MANY_REQUESTS {
			break
		}
		if n == 0 || i > 10 {
			t.Fatalf("greedy client: receive %d got %d messages, status %v", i, n, code)
		}
	}
	if n, code := receive("polite", "GShared"); n == 0 || code != apiv2.Code_OK {
		t.Fatalf("the group's other client: %d messages, status %v; want some", n, code)
	}
	// Three groups that never ack, each with a new client per receive,
	// receive until refused; another group is still served.
	for h := range 3 {
		group := fmt.Sprintf("GHog%d", h)
		for i := 0; ; i++ {
			n, code := receive(fmt.Sprintf("hog%d-%d", h, i), group)
			if code == apiv2.Code_TOO_MANY_REQUESTS {
				break
			}
			if n == 0 || i > 20 {
				t.Fatalf("hog %d: receive %d got %d messages, status %v", h, i, n, code)
			}
		}
	}
	if n, code := receive("victim", "GVictim"); n == 0 || code != apiv2.Code_OK {
		t.Fatalf("another group after three that never ack: %d messages, status %v; want some", n, code)
	}
}

// ---- the long form ----

// memPeak samples the heap in use every 2 ms until stop.
type memPeak struct {
	heap atomic.Uint64
	stop chan struct{}
	done sync.WaitGroup
}

func startMemPeak() *memPeak {
	runtime.GC()
	p := &memPeak{stop: make(chan struct{})}
	p.done.Go(func() {
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > p.heap.Load() {
				p.heap.Store(ms.HeapInuse)
			}
			select {
			case <-p.stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	return p
}

func (p *memPeak) end() uint64 { close(p.stop); p.done.Wait(); return p.heap.Load() }

// vmHWM is the process's peak resident set (/proc/self/status), bytes.
func vmHWM() uint64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func mib(n uint64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

// TestGRPCHostileLong (-hostile.long): each attack at scale with the
// default limits, one after the other, each with the heap's peak and the
// time until an honest client is served again.
func TestGRPCHostileLong(t *testing.T) {
	if !*hostileLong {
		t.Skip("the long form runs with -hostile.long")
	}
	e := startEnv(t, envOpts{proxy: func(c *proxy.Config) { c.SendTimeout = 2 * time.Second }})
	addr := e.srv.Addr().String()
	honest := func() time.Duration {
		start := time.Now()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			resp, err := e.cli.SendMessage(withClient(ctx, "honest"), &apiv2.SendMessageRequest{Messages: []*apiv2.Message{textMsg("HonestT", "", "hello")}})
			cancel()
			if err == nil && resp.GetStatus().GetCode() == apiv2.Code_OK {
				return time.Since(start)
			}
			if time.Since(start) > time.Minute {
				t.Fatalf("an honest send failed for a minute: %v %v", resp.GetStatus(), err)
			}
		}
	}
	honest()
	report := func(what string, p *memPeak, extra string) {
		t.Logf("%-34s heap peak %8s  VmHWM %8s  %s  honest send after: %s", what, mib(p.end()), mib(vmHWM()), extra, honest())
	}

	// 6: gzip bombs: 16 clients x 8 requests of 1,024 messages each
	// inflating to the 4 MiB message limit (4 GiB a request unbounded).
	p := startMemPeak()
	one := gzipZeros(t, 4<<20-1024)
	var batch []*apiv2.Message
	for i := range 1024 {
		batch = append(batch, gzipMsg("BombT", fmt.Sprintf("B%04d", i), one))
	}
	var wg sync.WaitGroup
	var refusedBombs atomic.Int32
	for c := range 16 {
		wg.Go(func() {
			for range 8 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				resp, err := e.cli.SendMessage(withClient(ctx, fmt.Sprintf("bomb%d", c)), &apiv2.SendMessageRequest{Messages: batch})
				cancel()
				if err == nil && resp.GetStatus().GetCode() == apiv2.Code_PAYLOAD_TOO_LARGE {
					refusedBombs.Add(1)
				}
			}
		})
	}
	wg.Wait()
	report("gzip bombs (128 x 1,024 x 4 MiB)", p, fmt.Sprintf("refused %d/128, stored %d", refusedBombs.Load(), queueEnd(e, "BombT")))

	// 7: 32 receivers that never read, 4 messages of 32 MiB inflated each.
	z := zlibOf(bytes.Repeat([]byte{'z'}, 32<<20))
	for range 128 {
		remotingSendZlib(t, e.b, "ZipT", z)
	}
	p = startMemPeak()
	var stuckConns []*grpc.ClientConn
	var peakRecv int64
	for i := range 32 {
		conn, cli := stuckClient(t, addr)
		stuckConns = append(stuckConns, conn)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		if _, err := cli.ReceiveMessage(withClient(ctx, fmt.Sprintf("stuck%d", i)), receiveReq(fmt.Sprintf("GZ%d", i), "ZipT", 4)); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for time.Since(start) < 3*time.Minute {
		peakRecv = max(peakRecv, e.srv.ReceiveMemory())
		if e.srv.ReceiveMemory() == 0 && time.Since(start) > 3*time.Second {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	closedConns := 0
	for _, c := range stuckConns {
		if c.GetState() != connectivity.Ready {
			closedConns++
		}
	}
	report("32 receivers never reading 4x32 MiB", p, fmt.Sprintf("receive memory peak %s, back to 0 after %s, %d/32 of their connections closed, live heap then %s",
		mib(uint64(peakRecv)), time.Since(start).Round(time.Millisecond), closedConns, mib(liveHeap())))
	for _, c := range stuckConns {
		c.Close()
	}

	// 8: 8,000 silent connections from one address, then from 16.
	for _, ips := range []int{1, 16} {
		p = startMemPeak()
		var silent []net.Conn
		var dialErrs int
		maxHeld := 0
		for i := range 8000 {
			c, err := rawConn(t, addr, fmt.Sprintf("127.0.1.%d", 1+i%ips))
			if err != nil {
				dialErrs++
				continue
			}
			silent = append(silent, c)
			if i%250 == 0 {
				maxHeld = max(maxHeld, e.srv.Conns())
			}
		}
		maxHeld = max(maxHeld, e.srv.Conns())
		served := heartbeatFrom(t, addr, "127.0.2.1", 5*time.Second)
		start = time.Now()
		for e.srv.Conns() > 2 && time.Since(start) < time.Minute {
			time.Sleep(20 * time.Millisecond)
		}
		gone := time.Since(start).Round(time.Millisecond)
		for _, c := range silent {
			c.Close()
		}
		report(fmt.Sprintf("8,000 silent connections from %d IPs", ips), p, fmt.Sprintf("held at most %d (dial errors %d), a client during the flood: %v, flood gone after %s",
			maxHeld, dialErrs, served, gone))
	}

	// 9: 40 connections x 100 streams with 1 MiB of headers each.
	p = startMemPeak()
	var resets, closed atomic.Int32
	for range 40 {
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			bw := bufio.NewWriter(c)
			bw.WriteString(http2.ClientPreface)
			fr := http2.NewFramer(bw, c)
			fr.WriteSettings()
			var hb bytes.Buffer
			enc := hpack.NewEncoder(&hb)
			for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/apache.rocketmq.v2.MessagingService/Heartbeat"},
				{":authority", "x"}, {"content-type", "application/grpc"}} {
				enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			for i := 0; i < 1<<20; i += 8 << 10 {
				enc.WriteField(hpack.HeaderField{Name: "x-junk-" + strconv.Itoa(i), Value: strings.Repeat("j", 8<<10), Sensitive: true})
			}
			block := hb.Bytes()
			for s := range 100 {
				id := uint32(2*s + 1)
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block[:16<<10]})
				for rest := block[16<<10:]; len(rest) > 0; {
					n := min(len(rest), 16<<10)
					fr.WriteContinuation(id, n == len(rest), rest[:n])
					rest = rest[n:]
				}
			}
			bw.Flush()
			for n := 0; n < 100; {
				f, err := fr.ReadFrame()
				if err != nil {
					closed.Add(1)
					return
				}
				switch f.(type) {
				case *http2.RSTStreamFrame:
					resets.Add(1)
					n++
				case *http2.GoAwayFrame:
					closed.Add(1)
					return
				}
			}
		})
	}
	wg.Wait()
	report("40 x 100 streams of 1 MiB headers", p, fmt.Sprintf("streams reset %d, connections closed %d/40", resets.Load(), closed.Load()))
}

// TestGRPCHostileHeap (-hostile.heap): the heap's peak under a gzip bomb
// (4 clients, one request each of 64 bodies inflating to 4 MiB: 1 GiB
// unbounded) and under receivers that never read (8 streams of 4 stored
// bodies inflating to 32 MiB), small enough for code without the bounds
// to survive, so the two can be compared.
func TestGRPCHostileHeap(t *testing.T) {
	if !*hostileHeap {
		t.Skip("runs with -hostile.heap")
	}
	e := startEnv(t, envOpts{proxy: func(c *proxy.Config) { c.SendTimeout = 5 * time.Second }})
	p := startMemPeak()
	one := gzipZeros(t, 4<<20-1024)
	var batch []*apiv2.Message
	for i := range 64 {
		batch = append(batch, gzipMsg("BombT", fmt.Sprintf("B%04d", i), one))
	}
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			resp, err := e.cli.SendMessage(withClient(ctx, fmt.Sprintf("bomb%d", c)), &apiv2.SendMessageRequest{Messages: batch})
			t.Logf("bomb %d: %v %v", c, resp.GetStatus().GetCode(), err)
		})
	}
	wg.Wait()
	t.Logf("gzip bomb (4 x 64 x 4 MiB): heap peak %s, VmHWM %s, stored %d", mib(p.end()), mib(vmHWM()), queueEnd(e, "BombT"))

	z := zlibOf(bytes.Repeat([]byte{'z'}, 32<<20))
	for range 32 {
		remotingSendZlib(t, e.b, "ZipT", z)
	}
	p = startMemPeak()
	for i := range 8 {
		_, cli := stuckClient(t, e.srv.Addr().String())
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		if _, err := cli.ReceiveMessage(withClient(ctx, fmt.Sprintf("stuck%d", i)), receiveReq(fmt.Sprintf("GZ%d", i), "ZipT", 4)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(12 * time.Second) // what the receivers make the server hold, past twice the send timeout
	peak := p.end()
	t.Logf("8 receivers never reading 4 x 32 MiB: heap peak %s, VmHWM %s; after 12 s: live heap %s, connections %d, receive memory %d",
		mib(peak), mib(vmHWM()), mib(liveHeap()), e.srv.Conns(), e.srv.ReceiveMemory())
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}
