// Package hatest is a hand-written HA client for tests: what anyone who
// reaches a master's HA port can send (ha's doc.go describes the
// protocol). It speaks the wire format by hand, not through package ha,
// so a test can say hello with or without the secret, ack what it never
// read, ack nothing, or read the whole stream. It imports nothing of ours.
package hatest

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"time"
)

const (
	magic     = uint32(0x534D4841) // "SMHA"
	headerLen = 28
	// challengeWait is how long Hello waits for a master's challenge
	// (protocol 4 sends one at once) before it speaks protocol 3, whose
	// master waits for the hello.
	challengeWait = 2 * time.Second
)

// Slave is one connection to a master's HA port, past its hello.
type Slave struct {
	C net.Conn
	// Version is the protocol the master spoke: 4 (it sent a challenge)
	// or 3.
	Version uint16
	// Status and MasterMax are from the master's reply.
	Status    uint16
	MasterMax int64
	start     int64            // the hello's offset
	end       int64            // the end of the transfers read
	sum       uint32           // CRC-32C of the bodies read
	sums      map[int64]uint32 // sum at the end of each transfer read
	// Received counts the body bytes read.
	Received int64
}

// Hello dials addr and says hello as a slave of name whose log ends at
// offset, agreeing with epoch, signed under secret (nil: none, or a
// wrong one to be refused). It returns the slave whatever the reply's
// status; err is for the connection only.
func Hello(addr, name string, offset, epoch int64, secret []byte) (*Slave, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	s := &Slave{C: c, start: offset, end: offset}
	if err := s.hello(name, offset, epoch, secret); err != nil {
		c.Close()
		return nil, err
	}
	return s, nil
}

func (s *Slave) hello(name string, offset, epoch int64, secret []byte) error {
	c := s.C
	var ch [24]byte
	c.SetReadDeadline(time.Now().Add(challengeWait))
	_, err := io.ReadFull(c, ch[:8])
	switch {
	case err == nil:
		if _, err := io.ReadFull(c, ch[8:]); err != nil {
			return err
		}
		s.Version = binary.BigEndian.Uint16(ch[4:])
	case errors.Is(err, os.ErrDeadlineExceeded):
		s.Version = 3
	default:
		return err
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	h := binary.BigEndian.AppendUint32(nil, magic)
	h = binary.BigEndian.AppendUint16(h, s.Version)
	h = binary.BigEndian.AppendUint16(h, uint16(len(name)))
	h = append(h, name...)
	h = binary.BigEndian.AppendUint64(h, uint64(offset))
	h = binary.BigEndian.AppendUint64(h, uint64(epoch))
	var nonce [16]byte
	if s.Version >= 4 {
		rand.Read(nonce[:])
		h = append(h, nonce[:]...)
		m := hmac.New(sha256.New, secret)
		m.Write([]byte("stratamq-ha-hello-v4"))
		m.Write(ch[8:24])
		m.Write(h)
		h = m.Sum(h)
	}
	if _, err := c.Write(h); err != nil {
		return err
	}
	var r [26]byte
	if _, err := io.ReadFull(c, r[:]); err != nil {
		return fmt.Errorf("reading the reply: %w", err)
	}
	s.Status = binary.BigEndian.Uint16(r[6:])
	s.MasterMax = int64(binary.BigEndian.Uint64(r[16:]))
	tail := int(binary.BigEndian.Uint16(r[24:]))
	if s.Version >= 4 {
		tail += sha256.Size
	}
	_, err = io.ReadFull(c, make([]byte, tail))
	return err
}

// Transfer is one transfer the master sent.
type Transfer struct {
	Offset, Epoch, MasterMax int64
	Body                     []byte
}

// Next reads one transfer (a heartbeat has no body) within d, and keeps
// the stream's checksum.
func (s *Slave) Next(d time.Duration) (Transfer, error) {
	s.C.SetReadDeadline(time.Now().Add(d))
	var h [headerLen]byte
	if _, err := io.ReadFull(s.C, h[:]); err != nil {
		return Transfer{}, err
	}
	t := Transfer{Offset: int64(binary.BigEndian.Uint64(h[:])), Epoch: int64(binary.BigEndian.Uint64(h[8:])),
		MasterMax: int64(binary.BigEndian.Uint64(h[16:]))}
	n := int32(binary.BigEndian.Uint32(h[24:]))
	if n < 0 || n > 64<<20 {
		return t, fmt.Errorf("transfer of %d bytes", n)
	}
	t.Body = make([]byte, n)
	if _, err := io.ReadFull(s.C, t.Body); err != nil {
		return t, err
	}
	s.end = t.Offset + int64(n)
	s.sum = crc32.Update(s.sum, crc32.MakeTable(crc32.Castagnoli), t.Body)
	s.Received += int64(n)
	if n > 0 {
		if s.sums == nil {
			s.sums = map[int64]uint32{}
		}
		s.sums[s.end] = s.sum
	}
	return t, nil
}

// ReadUntil reads transfers until the stream reaches end (within d).
func (s *Slave) ReadUntil(end int64, d time.Duration) error {
	deadline := time.Now().Add(d)
	for s.end < end {
		if _, err := s.Next(time.Until(deadline)); err != nil {
			return err
		}
	}
	return nil
}

// Ack reports off with the checksum sum (protocol 3 has none).
func (s *Slave) Ack(off int64, sum uint32) error {
	b := binary.BigEndian.AppendUint64(nil, uint64(off))
	if s.Version >= 4 {
		b = binary.BigEndian.AppendUint32(b, sum)
	}
	s.C.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := s.C.Write(b)
	return err
}

// AckRead reports the end of what Next read, with its true checksum: an
// honest slave's report.
func (s *Slave) AckRead() error { return s.Ack(s.end, s.sum) }

// AckAt reports off, the end of a transfer Next read, with the stream's
// true checksum there.
func (s *Slave) AckAt(off int64) error {
	sum, ok := s.sums[off]
	if !ok && off != s.start {
		return fmt.Errorf("offset %d is not the end of a transfer read", off)
	}
	return s.Ack(off, sum)
}

// Read is the end of what Next read.
func (s *Slave) Read() int64 { return s.end }

// Close closes the connection.
func (s *Slave) Close() error { return s.C.Close() }

// HelloMsg is a slave's hello as a fake master reads it.
type HelloMsg struct {
	Name          string
	Offset, Epoch int64
}

// ReplyMsg is a fake master's answer to a hello.
type ReplyMsg struct {
	Status           uint16
	Epoch, MasterMax int64
	Advertise        string
}

// Accept is a master's side of the handshake (protocol 4) on c, by hand:
// the challenge, the slave's hello (its signature not checked), and the
// reply answer gives, signed under secret. Then the caller streams.
func Accept(c net.Conn, secret []byte, answer func(HelloMsg) ReplyMsg) (HelloMsg, error) {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	var mn [16]byte
	rand.Read(mn[:])
	ch := binary.BigEndian.AppendUint32(nil, magic)
	ch = binary.BigEndian.AppendUint16(ch, 4)
	ch = binary.BigEndian.AppendUint16(ch, 0)
	ch = append(ch, mn[:]...)
	if len(secret) > 0 {
		binary.BigEndian.PutUint16(ch[6:], 1)
	}
	if _, err := c.Write(ch); err != nil {
		return HelloMsg{}, err
	}
	var b [8]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return HelloMsg{}, err
	}
	n := int(binary.BigEndian.Uint16(b[6:]))
	rest := make([]byte, n+16+16+sha256.Size)
	if _, err := io.ReadFull(c, rest); err != nil {
		return HelloMsg{}, err
	}
	h := HelloMsg{Name: string(rest[:n]), Offset: int64(binary.BigEndian.Uint64(rest[n:])), Epoch: int64(binary.BigEndian.Uint64(rest[n+8:]))}
	sn := rest[n+16 : n+32]
	a := answer(h)
	r := binary.BigEndian.AppendUint32(nil, magic)
	r = binary.BigEndian.AppendUint16(r, 4)
	r = binary.BigEndian.AppendUint16(r, a.Status)
	r = binary.BigEndian.AppendUint64(r, uint64(a.Epoch))
	r = binary.BigEndian.AppendUint64(r, uint64(a.MasterMax))
	r = binary.BigEndian.AppendUint16(r, uint16(len(a.Advertise)))
	r = append(r, a.Advertise...)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("stratamq-ha-reply-v4"))
	m.Write(sn)
	m.Write(mn[:])
	m.Write(r)
	r = m.Sum(r)
	_, err := c.Write(r)
	return h, err
}
