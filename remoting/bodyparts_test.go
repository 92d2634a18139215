package remoting

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestRemotingManySmallBodyPartsByReference: a response whose body is many
// small parts adding up to more than the inline limit (a pull response)
// arrives byte-identical, in order; so does a small one that is copied.
func TestRemotingManySmallBodyPartsByReference(t *testing.T) {
	for _, tc := range []struct {
		name         string
		parts, psize int
	}{{"by-reference", 300, 1100}, {"inline", 10, 900}} {
		t.Run(tc.name, func(t *testing.T) {
			var want []byte
			parts := make([][]byte, tc.parts)
			for i := range parts {
				parts[i] = bytes.Repeat([]byte{byte(i)}, tc.psize)
				want = append(want, parts[i]...)
			}
			h := HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
				resp := NewResponse(req, Success, "")
				resp.BodyParts = parts
				return resp
			})
			s := startServer(t, ServerConfig{}, h)
			cl := newTestClient(t, nil)
			for i := 0; i < 3; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, err := cl.Invoke(ctx, s.Addr().String(), NewRequest(PullMessage, nil, nil))
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(resp.Body, want) {
					t.Fatalf("body differs: got %d bytes, want %d", len(resp.Body), len(want))
				}
			}
		})
	}
}
