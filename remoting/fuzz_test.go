package remoting

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const fuzzMaxFrame = 1 << 16

// splitReader returns its input in two reads, split at a chosen point,
// the way TCP may deliver a frame.
type splitReader struct {
	parts [][]byte
	read  int
}

func (s *splitReader) Read(p []byte) (int, error) {
	for len(s.parts) > 0 && len(s.parts[0]) == 0 {
		s.parts = s.parts[1:]
	}
	if len(s.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.parts[0])
	s.parts[0] = s.parts[0][n:]
	s.read += n
	return n, nil
}

// FuzzDecodeFrame feeds arbitrary bytes, delivered in two reads split at
// split, through ReadFrame and DecodeFrame. Invariants:
//
//  1. Nothing panics.
//  2. ReadFrame never allocates more than its max: a length word above max
//     is ErrFrameTooLarge, and a length below 4 ErrMalformed, after reading
//     only the 4 length bytes; a returned frame is never longer than max.
//  3. Decode errors wrap ErrMalformed.
//  4. A decoded command re-encodes (in its own serialization), the
//     re-encoded frame decodes to an equal command, and encoding that
//     command again gives the same bytes.
func FuzzDecodeFrame(f *testing.F) {
	entries, _ := os.ReadDir(goldenDir)
	for _, e := range entries {
		if b, err := os.ReadFile(filepath.Join(goldenDir, e.Name())); err == nil {
			f.Add(b, uint(len(b)/2))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, split uint) {
		at := int(split % uint(len(data)+1))
		in := append([]byte(nil), data...)
		r := &splitReader{parts: [][]byte{in[:at], in[at:]}}
		frame, err := ReadFrame(r, nil, fuzzMaxFrame)
		if err != nil {
			if errors.Is(err, ErrFrameTooLarge) || errors.Is(err, ErrMalformed) {
				if r.read != 4 {
					t.Fatalf("read %d bytes before rejecting the length", r.read)
				}
			}
			return
		}
		if len(frame) > fuzzMaxFrame || cap(frame) > fuzzMaxFrame {
			t.Fatalf("frame of %d bytes (cap %d) above max %d", len(frame), cap(frame), fuzzMaxFrame)
		}
		c, err := DecodeFrame(frame)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("decode error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		re, err := AppendFrame(nil, c)
		if err != nil {
			t.Fatalf("re-encode of a decoded command: %v (%+v)", err, c)
		}
		c2, err := DecodeFrame(re[4:])
		if err != nil {
			t.Fatalf("re-encoded frame does not decode: %v\n%q", err, re)
		}
		if !equalCommands(c, c2) {
			t.Fatalf("re-decoded command differs\n got %+v\nwant %+v", c2, c)
		}
		re2, err := AppendFrame(nil, c2)
		if err != nil || !bytes.Equal(re, re2) {
			t.Fatalf("encoding is not stable: %v\n%q\n%q", err, re, re2)
		}
	})
}

// TestRemotingGoldenFuzzSeeds keeps the committed seed corpus in step with
// the golden frames; -update rewrites it.
func TestRemotingGoldenFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeFrame")
	entries, err := os.ReadDir(goldenDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(goldenDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nuint(%d)\n", b, len(b)/2)
		path := filepath.Join(dir, "golden-"+strings.TrimSuffix(e.Name(), ".bin"))
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Errorf("fuzz seed %s missing or stale (%v); %s", path, err, goldenHint)
		}
	}
}

// FuzzJSONHeaderFastPath checks the hand-written JSON header decoder
// against encoding/json: whenever the fast path accepts an input,
// encoding/json must accept it too and produce the same command.
func FuzzJSONHeaderFastPath(f *testing.F) {
	entries, _ := os.ReadDir(goldenDir)
	for _, e := range entries {
		if b, err := os.ReadFile(filepath.Join(goldenDir, e.Name())); err == nil && len(b) > 8 && b[4] == 0 {
			hl := int(b[5])<<16 | int(b[6])<<8 | int(b[7])
			if 8+hl <= len(b) {
				f.Add(b[8 : 8+hl])
			}
		}
	}
	f.Add([]byte(`{"code":1,"extFields":{"a":1.5e3,"b":null,"c":"\u00e9\n"},"remark":null,"x":[1]}`))
	for _, ext := range []string{
		`{"batch":"false","bornTimestamp":"1","defaultTopic":"TBW102","defaultTopicQueueNums":"4","flag":"0","producerGroup":"g","properties":"A\u0001b\u0002","queueId":"1","reconsumeTimes":"0","sysFlag":"0","topic":"T","unitMode":"false"}`,
		`{"bname":"b","defaultTopic":"TBW102","defaultTopicQueueNums":"4","flag":"0","producerGroup":"g","queueId":"1","sysFlag":"0","topic":"T","bornTimestamp":"1"}`,
		`{"batch":"false","bornTimestamp":"1","defaultTopic":"T","defaultTopicQueueNums":4,"flag":"0","producerGroup":"g","queueId":"x","sysFlag":"0","topic":"T"}`,
		`{"a":"g","b":"T","c":"TBW102","d":"4","e":"1","f":"0","g":"1","h":"0","topic":"U","n":"bn"}`,
	} {
		f.Add([]byte(`{"code":10,"language":"GO","version":317,"opaque":1,"flag":0,"remark":"","extFields":` + ext + `}`))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := decodeJSONFrameHeader(b)
		if !ok {
			return
		}
		// A send header read from the decoded pairs (as the broker does,
		// by position when the decoder matched client-go's keys) equals
		// one read from encoding/json's map, errors included.
		var fh, sh SendMessageRequestHeader
		ferr := fh.DecodeCommand(fast)
		fast.ExtMap()
		slow, err := decodeJSONHeaderSlow(b)
		if err != nil {
			t.Fatalf("fast path accepted what encoding/json rejects (%v): %q", err, b)
		}
		if !equalCommands(fast, slow) {
			t.Fatalf("fast path differs on %q\nfast %+v\nslow %+v", b, fast, slow)
		}
		serr := sh.Decode(slow.ExtFields)
		if fh != sh || fmt.Sprint(ferr) != fmt.Sprint(serr) {
			t.Fatalf("send header differs on %q\nfast %+v (%v)\nslow %+v (%v)", b, fh, ferr, sh, serr)
		}
	})
}

// fastHeader is the production fast path, decodeJSONFrameHeader, with the
// extFields map built, for comparing with decodeJSONHeaderSlow.
func fastHeader(b []byte) (*Command, bool) {
	c, ok := decodeJSONFrameHeader(b)
	if ok {
		c.ExtMap()
	}
	return c, ok
}

// FuzzBinaryHeaderFastPath checks decodeBinaryFrameHeader against
// decodeBinaryHeader: whatever the fast path accepts, the map decoder
// accepts too and decodes to the same command; whatever the map decoder
// refuses, the fast path declines.
func FuzzBinaryHeaderFastPath(f *testing.F) {
	for _, c := range []*Command{
		{Code: 10, Language: "JAVA", Version: 407, Opaque: 7, ExtFields: map[string]string{"a": "x", "topic": "T", "properties": "UNIQ_KEY\x01AB\x02"}},
		{Code: 0, Flag: FlagResponse, Remark: "fine", Opaque: -3},
		{Code: 11, Remark: "", ExtFields: map[string]string{"": ""}},
	} {
		frame, err := AppendFrame(nil, &Command{Code: c.Code, Language: c.Language, Version: c.Version, Opaque: c.Opaque,
			Flag: c.Flag, Remark: c.Remark, ExtFields: c.ExtFields, Serialize: SerializeRocketMQ})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(frame[8:])
	}
	// A duplicate key: the map keeps the last value, so the fast path declines.
	f.Add([]byte{0, 10, 0, 1, 0x97, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15,
		0, 1, 'k', 0, 0, 0, 0, 0, 1, 'k', 0, 0, 0, 1, 'v'})
	f.Fuzz(func(t *testing.T, b []byte) {
		slow, err := decodeBinaryHeader(b)
		fast, ok := decodeBinaryFrameHeader(b)
		if err != nil {
			if ok {
				t.Fatalf("fast path accepted what decodeBinaryHeader refuses (%v): %q", err, b)
			}
			return
		}
		if !ok {
			return
		}
		fast.ExtMap()
		if !equalCommands(fast, slow) {
			t.Fatalf("fast path differs on %q\nfast %+v\nslow %+v", b, fast, slow)
		}
	})
}
