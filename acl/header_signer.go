package acl

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash"

	"github.com/stratamq/stratamq/remoting"
)

// HeaderSigner signs requests written with a typed header
// (remoting.Command.Header) without building a map or a string per
// field: for a client that sends many (stratamq bench). The signature is
// the one Credentials.Sign computes. A HeaderSigner is reused from one
// request to the next and is not safe for concurrent use.
type HeaderSigner struct {
	c     Credentials
	fixed []kvRef // AccessKey (and SecurityToken), as bytes once
	mac   hash.Hash
	enc   []byte // the signed header's binary encoding (not made for an ExtValuesAppender)
	kv    []kvRef
	buf   []byte
	sig   [28]byte
	inner remoting.ExtAppender
}

type kvRef struct{ k, v []byte }

// NewHeaderSigner returns a signer for c (nil for zero credentials).
func (c Credentials) NewHeaderSigner() *HeaderSigner {
	if c.IsZero() {
		return nil
	}
	s := &HeaderSigner{c: c, mac: hmac.New(sha1.New, []byte(c.SecretKey))}
	s.fixed = append(s.fixed, kvRef{k: []byte(KeyAccessKey), v: []byte(c.AccessKey)})
	if c.SecurityToken != "" {
		s.fixed = append(s.fixed, kvRef{k: []byte(KeySecurityToken), v: []byte(c.SecurityToken)})
	}
	return s
}

var errBadHeader = errors.New("acl: malformed typed header")

// Sign computes the signature of h's fields, the access key (and token)
// and body, and returns the header to send in place of h: h's fields
// plus AccessKey, Signature and SecurityToken. It stays valid until the
// next Sign.
func (s *HeaderSigner) Sign(h remoting.ExtAppender, body []byte) (remoting.ExtAppender, error) {
	s.inner, s.enc = h, s.enc[:0]
	s.buf = s.buf[:0]
	if va, ok := h.(remoting.ExtValuesAppender); ok {
		// Its keys sort after AccessKey and SecurityToken, in its order,
		// and none is one to leave out: no encoding, parsing or sorting.
		for _, p := range s.fixed {
			s.buf = append(s.buf, p.v...)
		}
		s.buf = va.AppendExtValues(s.buf)
	} else if err := s.sortedValues(h); err != nil {
		return nil, err
	}
	s.mac.Reset()
	s.mac.Write(s.buf)
	if len(body) > 0 {
		s.mac.Write(body)
	}
	s.buf = s.mac.Sum(s.buf[:0])
	base64.StdEncoding.Encode(s.sig[:], s.buf)
	return s, nil
}

// sortedValues puts in s.buf the values of h's fields and the fixed ones,
// in ascending order of their keys, leaving out those Sign sets or the
// Java client does not sign; s.enc keeps h's binary encoding.
func (s *HeaderSigner) sortedValues(h remoting.ExtAppender) error {
	var err error
	if s.enc, err = remoting.AppendExtBinary(s.enc, h); err != nil {
		return err
	}
	s.kv = append(s.kv[:0], s.fixed...)
	for b := s.enc; len(b) > 0; {
		if len(b) < 2 {
			return errBadHeader
		}
		kl := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+kl+4 {
			return errBadHeader
		}
		k := b[2 : 2+kl]
		vl := int(binary.BigEndian.Uint32(b[2+kl:]))
		b = b[2+kl+4:]
		if vl < 0 || len(b) < vl {
			return errBadHeader
		}
		switch string(k) {
		case KeyAccessKey, KeySignature, KeySecurityToken, keyUniqueQuery:
		default:
			s.kv = append(s.kv, kvRef{k: k, v: b[:vl]})
		}
		b = b[vl:]
	}
	for i := 1; i < len(s.kv); i++ {
		for j := i; j > 0 && string(s.kv[j].k) < string(s.kv[j-1].k); j-- {
			s.kv[j], s.kv[j-1] = s.kv[j-1], s.kv[j]
		}
	}
	for _, p := range s.kv {
		s.buf = append(s.buf, p.v...)
	}
	return nil
}

// AppendJSONExt implements remoting.JSONExtAppender: AppendExt's JSON,
// the signed header's part by its own JSON encoder when it has one.
func (s *HeaderSigner) AppendJSONExt(dst []byte) []byte {
	dst = append(dst, `"AccessKey":`...)
	dst = remoting.AppendJSONString(dst, s.c.AccessKey)
	if s.c.SecurityToken != "" {
		dst = append(dst, `,"SecurityToken":`...)
		dst = remoting.AppendJSONString(dst, s.c.SecurityToken)
	}
	dst = append(dst, `,"Signature":"`...)
	dst = append(dst, s.sig[:]...) // base64: nothing to escape
	dst = append(dst, '"')
	n := len(dst)
	dst = remoting.AppendExtJSON(append(dst, ','), s.inner)
	if len(dst) == n+1 { // the header has no fields: no comma
		dst = dst[:n]
	}
	return dst
}

// AppendBinaryExt implements remoting.BinaryExtAppender: AppendExt in the
// binary header, the signed header's part by its own encoder or as Sign
// encoded it.
func (s *HeaderSigner) AppendBinaryExt(dst []byte) []byte {
	dst = remoting.AppendBinaryField(dst, KeyAccessKey, s.c.AccessKey)
	if s.c.SecurityToken != "" {
		dst = remoting.AppendBinaryField(dst, KeySecurityToken, s.c.SecurityToken)
	}
	dst = append(binary.BigEndian.AppendUint16(dst, uint16(len(KeySignature))), KeySignature...)
	dst = append(binary.BigEndian.AppendUint32(dst, uint32(len(s.sig))), s.sig[:]...)
	if va, ok := s.inner.(remoting.ExtValuesAppender); ok {
		return va.AppendBinaryExt(dst) // Sign took its values, not its encoding
	}
	return append(dst, s.enc...)
}

// AppendExt implements remoting.ExtAppender: AccessKey, SecurityToken and
// Signature (upper-case keys sort before the headers' lower-case ones),
// then the signed header's fields.
func (s *HeaderSigner) AppendExt(w *remoting.ExtWriter) {
	w.String(KeyAccessKey, s.c.AccessKey)
	if s.c.SecurityToken != "" {
		w.String(KeySecurityToken, s.c.SecurityToken)
	}
	w.Bytes(KeySignature, s.sig[:])
	s.inner.AppendExt(w)
}
