// Package remoting speaks Apache RocketMQ's remoting protocol: frames,
// commands, request/response codes, the typed custom headers and JSON
// bodies of the codes StrataMQ serves, and the connection loops of a
// server and a client.
//
// It owns the wire. It never imports another StrataMQ package; broker,
// namesrv and test clients share its types (as franz-go's kmsg serves both
// its client and its fake). Facts about the protocol come from
// docs/rocketmq-protocol.md.
//
// # Frames
//
// Every integer is big-endian.
//
//	+-----------+---------------------------+-------------+------------+
//	| total     | type(1) | headerLen(3)    | header      | body       |
//	| int32     | int32                     | headerLen B | the rest   |
//	+-----------+---------------------------+-------------+------------+
//	total = 4 + headerLen + len(body); it does not count itself.
//	type 0 = JSON header, 1 = ROCKETMQ binary header.
//
// JSON header (what client-go sends; we write the same key order, extFields
// keys sorted, every extFields value a JSON string):
//
//	{"code":10,"language":"GO","version":317,"opaque":1,"flag":0,"remark":"","extFields":{"topic":"T",...}}
//
// Decoding also accepts Java's fastjson form: keys in any order, remark
// absent or null, a serializeTypeCurrentRPC key, and numbers or booleans
// as extFields values (they become their JSON text).
//
// ROCKETMQ binary header:
//
//	code int16 | language byte | version int16 | opaque int32 | flag int32 |
//	remarkLen int32 | remark | extLen int32 | ext: { keyLen int16 | key | valLen int32 | val }*
//
// flag bit 0 marks a response, bit 1 a oneway request. A response uses the
// serialization of its request, and its opaque.
//
// # Using it
//
// Encode with AppendFrame (or AppendFrameHeader followed by the body
// slices, for vectored writes); read with ReadFrame and decode with
// DecodeFrame. A decoded Body aliases the frame buffer.
//
// A Server reads each conn on one goroutine and runs requests on bounded
// worker pools chosen by ServerConfig.Classify; a full pool is answered
// SYSTEM_BUSY at once. Handlers may return nil and answer later with
// Conn.WriteResponse (long polls). Responses may leave out of order. A
// malformed or oversized frame closes that conn only. A Client keeps one
// conn per address and dispatches requests the peer sends it to its
// Handler.
//
// # Resource limits
//
// A declared frame length is only a claim: a frame buffer starts at the
// bytes that arrived (or a 4 KiB chunk) and doubles as more arrive, so a
// reader never holds much more than it was sent. A Server bounds, over all
// its conns, the bytes of requests being read or waiting to be handled
// (ServerConfig.MaxReadMemory): a conn that would go over stops reading
// until memory is freed (backpressure, never a disconnect), and one frame
// at a time may use an overflow slot of one max frame, so a frame of the
// largest size always gets through and partial frames cannot deadlock.
// A frame must arrive whole within FrameTimeout of its first byte
// (slowloris); between frames the idle timeout applies. Conns over
// MaxConns or MaxConnsPerIP (per remote IP) are closed at accept with a
// rate-limited warning. A server conn holds its 64 KiB read buffer only
// while it is busy: it gets it with its first byte and drops it when it
// idles between frames for more than 2 s.
//
// Codes a handler does not serve are answered with NotSupported(req).
//
// # TLS
//
// ServerConfig.TLS with TLSMode permissive or enforcing (RocketMQ's
// tls.server.mode names) wraps the listener in TLSListener: each accepted
// conn reads its first byte on its own reader goroutine, under a handshake
// deadline (DefaultTLSHandshakeTimeout), never in the accept loop; 0x16 (a
// TLS record) starts a handshake, anything else is a plain conn
// (permissive) or closed (enforcing, ErrPlainRefused). A Client with
// ClientConfig.TLS handshakes as part of its dial. A TLS conn writes a
// batch of frames as one Write (one record) instead of a writev; a plain
// conn on a permissive port keeps writev. Conn.TLSState tells them apart.
// remoting builds no tls.Config: infra/tlsconf does, from files.
//
// # Names
//
// ValidateTopic and ValidateGroup are RocketMQ 4.9's name rules
// (^[%|a-zA-Z0-9_-]+$, topics up to 127 bytes, groups up to 255);
// IsSystemTopic and IsNotAllowedSendTopic its system-topic sets. The broker
// and the name server check every name a request takes to a path, a table
// key or a config table with them (names.go).
package remoting
