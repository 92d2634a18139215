package remoting

import (
	"bufio"
	"bytes"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// TestRemotingSendPathAllocations guards the send path's allocation budget
// (issue 5: nothing per message beyond the request's own buffer): a JSON
// SEND_MESSAGE frame as the official clients write it decodes, header
// included, with one allocation (the decoded request, which holds the
// header copy its strings alias), and a typed send response encodes with
// none.
func TestRemotingSendPathAllocations(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("allocation counts differ under -race and -cover")
	}
	var h SendMessageRequestHeader
	// Both serializations: JSON (client-go's, Java's default) and
	// RocketMQ's binary header (Java's rocketmq.serialize.type=ROCKETMQ).
	for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
		c := benchSendCommand(1024)
		c.Serialize = st
		frame, _ := AppendFrame(nil, c)
		raw := frame[4:]
		h = SendMessageRequestHeader{}
		// Headers other tests recycled would serve these decodes: empty
		// the pool (two collections: its victim cache survives one).
		runtime.GC()
		runtime.GC()
		decode := testing.AllocsPerRun(200, func() {
			d, err := decodeFrame(raw)
			if err != nil {
				t.Fatal(err)
			}
			if err := h.DecodeCommand(d); err != nil {
				t.Fatal(err)
			}
		})
		if decode != 1 {
			t.Errorf("decoding a SEND_MESSAGE frame (serialize type %d, header %d bytes) allocates %.0f times, want 1", st, len(frame)-4-1024, decode)
		}
		if !strings.Contains(h.Properties, "UNIQ_KEY") || h.Topic != "TopicA" {
			t.Fatalf("decoded header %+v", h)
		}
		if poisonRecycled {
			continue // under -race sync.Pool drops some of what it is given
		}
		// A send the handler marks for recycling, as the broker's plain
		// sends in a read batch are, gives its header back: the next
		// decode reuses it and allocates nothing.
		recycled := testing.AllocsPerRun(200, func() {
			d, err := decodeFrame(raw)
			if err != nil {
				t.Fatal(err)
			}
			if err := h.DecodeCommand(d); err != nil {
				t.Fatal(err)
			}
			d.recycle = true
			recycleHeader(d)
		})
		if recycled != 0 {
			t.Errorf("decoding a SEND_MESSAGE frame (serialize type %d) whose header is recycled allocates %.0f times, want 0", st, recycled)
		}
	}

	resp := &Command{Code: int32(Success), Language: LanguageGo, Version: Version, Opaque: 42, Flag: FlagResponse,
		Header: SendHeaderExt{H: &h}}
	buf := make([]byte, 0, 4096)
	encode := testing.AllocsPerRun(200, func() {
		var err error
		if buf, err = AppendFrameHeader(buf[:0], resp); err != nil {
			t.Fatal(err)
		}
	})
	if encode != 0 {
		t.Errorf("encoding a typed header allocates %.0f times, want 0", encode)
	}
}

// TestRemotingDecodedCommandFitsItsSizeClass: the decoded request and the
// header copy its strings alias are one allocation sized to fill a size
// class exactly (1,536 bytes; 896 without the copy). Objects of more than
// 512 bytes with pointers carry an 8-byte malloc header, so a field added
// to Command can push them into the next class (1,792 bytes) unnoticed by
// the allocation count.
func TestRemotingDecodedCommandFitsItsSizeClass(t *testing.T) {
	const mallocHeader = 8
	if n := unsafe.Sizeof(decodedCommandHeader{}) + mallocHeader; n > 1536 {
		t.Errorf("decodedCommandHeader takes %d bytes with its malloc header, over its 1,536-byte size class", n)
	}
	if n := unsafe.Sizeof(decodedCommandText{}) + mallocHeader; n > 896 {
		t.Errorf("decodedCommandText takes %d bytes with its malloc header, over its 896-byte size class", n)
	}
}

// TestRemotingClientReadsLargeFrameOnce: a client conn (no read budget)
// reads a 1 MiB response into one buffer of its declared length: one
// allocation, not a buffer grown by doubling from what was buffered
// (which copied the frame about twice and zeroed each new buffer).
func TestRemotingClientReadsLargeFrameOnce(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("allocation counts differ under -race and -cover")
	}
	resp := &Command{Code: int32(Success), Flag: FlagResponse, Body: bytes.Repeat([]byte{'r'}, 1<<20)}
	frame, err := AppendFrame(nil, resp)
	if err != nil {
		t.Fatal(err)
	}
	c := &Conn{maxFrame: 4 << 20} // as dialled: no budget, frames not pooled
	r := bytes.NewReader(frame)
	br := bufio.NewReaderSize(r, readBufferSize)
	allocs := testing.AllocsPerRun(20, func() {
		r.Reset(frame)
		br.Reset(r)
		f, err := c.readFrame(br)
		if err != nil || len(f.b) != len(frame)-4 {
			t.Fatalf("readFrame: %d bytes, %v", len(f.b), err)
		}
	})
	if allocs != 1 {
		t.Errorf("reading a 1 MiB frame on a client conn allocates %.0f times, want 1", allocs)
	}
}

// TestRemotingBodylessRequestGivesItsFrameBack: a request without a body
// (a pull, a heartbeat, an offset commit) read into a pooled frame gives
// the frame back as soon as it is decoded, whether or not its handler
// lets the server recycle frames, so such requests allocate no frame
// each; one with a body its handler may keep holds on to its frame (the
// body aliases it), and one whose handler lets it be recycled holds it
// until it is handled.
func TestRemotingBodylessRequestGivesItsFrameBack(t *testing.T) {
	if poisonRecycled || testing.CoverMode() != "" {
		t.Skip("sync.Pool drops some of what it is given under -race")
	}
	pull := &Command{Code: int32(PullMessage), Language: LanguageGo, Version: Version, Opaque: 7,
		ExtFields: map[string]string{"consumerGroup": "G", "topic": "T", "queueId": "1", "queueOffset": "0"}}
	withBody := &Command{Code: int32(PullMessage), Opaque: 8, ExtFields: map[string]string{"topic": "T"}, Body: []byte("kept body")}
	for _, tc := range []struct {
		name     string
		req      *Command
		reuse    bool
		returned bool // to the pool at once
	}{
		{"no body", pull, false, true},
		{"no body, recycled when handled", pull, true, false},
		{"a body", withBody, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame, err := AppendFrame(nil, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			runtime.GC()
			runtime.GC()
			var f frameBuf
			f.alloc(len(frame)-4, true)
			copy(f.b, frame[4:])
			p := f.pooled
			cmd, err := decodeFrame(f.b)
			if err != nil {
				t.Fatal(err)
			}
			keepFrame(cmd, &f, tc.reuse)
			next := getFrame(len(frame) - 4)
			if got := next == p; got != tc.returned {
				t.Fatalf("frame given back at once: %v, want %v", got, tc.returned)
			}
			if tc.reuse && cmd.frame != p {
				t.Fatal("the request does not hold the frame it is to recycle when handled")
			}
			if tc.req.Body != nil && string(cmd.Body) != string(tc.req.Body) {
				t.Fatalf("body %q after the frame was settled", cmd.Body)
			}
			if cmd.ExtMap()["topic"] != "T" {
				t.Fatalf("header %v", cmd.ExtMap())
			}
		})
	}
}
