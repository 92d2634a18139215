package acl

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"hash"
	"log/slog"
	"slices"
	"sync"

	"github.com/stratamq/stratamq/remoting"
)

// The extFields keys of a signed request (RocketMQ's SessionCredentials).
const (
	KeyAccessKey     = "AccessKey"
	KeySignature     = "Signature"
	KeySecurityToken = "SecurityToken"
	// keyUniqueQuery is the flag Java's queryMessage adds after signing
	// (MixAll.UNIQUE_MSG_QUERY_FLAG); a Java broker leaves it out of the
	// signed content, so this one does too.
	keyUniqueQuery = "_UNIQUE_KEY_QUERY"
)

// Secret is a secret key. It prints, logs and marshals as "[REDACTED]";
// string(s) is the only way to its value.
type Secret string

const redacted = "[REDACTED]"

func (Secret) String() string               { return redacted }
func (Secret) GoString() string             { return redacted }
func (Secret) LogValue() slog.Value         { return slog.StringValue(redacted) }
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }
func (Secret) Format(f fmt.State, _ rune)   { _, _ = f.Write([]byte(redacted)) }

// Credentials sign requests the way RocketMQ's clients do (Java's
// AclClientRPCHook, client-go's ACLInterceptor): extFields AccessKey,
// Signature and, when set, SecurityToken.
type Credentials struct {
	AccessKey     string
	SecretKey     Secret
	SecurityToken string
}

// IsZero reports whether c signs nothing (no access key or no secret).
func (c Credentials) IsZero() bool { return c.AccessKey == "" || c.SecretKey == "" }

// Sign adds AccessKey, Signature and SecurityToken (when set) to req. The
// signature is Base64(HMAC-SHA1(secret, content)), content being the
// values of every extFields entry but Signature, AccessKey and
// SecurityToken included, in ascending order of their keys, then the
// body; this is the content a Java broker checks. A request with a typed
// Header gets its extFields as a map first. Zero credentials sign nothing.
func (c Credentials) Sign(req *remoting.Command) {
	if c.IsZero() || req == nil {
		return
	}
	if req.ExtFields == nil {
		req.ExtFields = map[string]string{}
		if req.Header != nil {
			if pairs, err := remoting.ExtPairsOf(req.Header); err == nil {
				for _, p := range pairs {
					req.ExtFields[p.Key] = p.Value
				}
			}
			req.Header = nil
		}
	}
	delete(req.ExtFields, KeySignature)
	req.ExtFields[KeyAccessKey] = c.AccessKey
	if c.SecurityToken != "" {
		req.ExtFields[KeySecurityToken] = c.SecurityToken
	} else {
		delete(req.ExtFields, KeySecurityToken)
	}
	pairs := req.AppendExtPairs(nil)
	sortPairs(pairs)
	h := hmac.New(sha1.New, []byte(c.SecretKey))
	mac, _ := signContent(h, pairs, req.Body, false, nil)
	req.ExtFields[KeySignature] = base64.StdEncoding.EncodeToString(mac)
}

// signContent computes the MAC of a request's sorted pairs and body with
// h. Signature is always left out. By default _UNIQUE_KEY_QUERY is left
// out and SecurityToken kept (what the Java client signs and a Java
// broker checks); goStyle keeps the first and leaves out the second, as
// client-go's ACLInterceptor signs. The content is assembled in scratch,
// and the MAC appended after it: mac aliases the returned buffer, which
// the caller gives back to contentBufs once done with mac.
func signContent(h hash.Hash, sorted []remoting.ExtField, body []byte, goStyle bool, scratch []byte) (mac, buf []byte) {
	b := scratch[:0]
	for _, p := range sorted {
		switch p.Key {
		case KeySignature:
			continue
		case keyUniqueQuery:
			if !goStyle {
				continue
			}
		case KeySecurityToken:
			if goStyle {
				continue
			}
		}
		b = append(b, p.Value...)
	}
	h.Write(b)
	if len(body) > 0 {
		h.Write(body)
	}
	n := len(b)
	b = h.Sum(b)
	return b[n:], b
}

func getBuf() *[]byte { return contentBufs.Get().(*[]byte) }

func putBuf(p *[]byte, b []byte) {
	if cap(b) <= 64<<10 {
		*p = b[:0]
		contentBufs.Put(p)
	}
}

var contentBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// sortPairs sorts by key in byte order (Java's TreeMap order for the
// ASCII keys RocketMQ uses). Requests have a handful to a few dozen
// fields: an insertion sort needs no allocation.
func sortPairs(p []remoting.ExtField) {
	if len(p) > 64 {
		slices.SortFunc(p, func(a, b remoting.ExtField) int {
			switch {
			case a.Key < b.Key:
				return -1
			case a.Key > b.Key:
				return 1
			}
			return 0
		})
		return
	}
	for i := 1; i < len(p); i++ {
		for j := i; j > 0 && p[j].Key < p[j-1].Key; j-- {
			p[j], p[j-1] = p[j-1], p[j]
		}
	}
}

// sigEqual compares a computed MAC, base64-encoded, with the signature a
// request carries, in time independent of where they differ.
func sigEqual(mac []byte, sig string) bool {
	var enc [28]byte // base64 of 20 bytes
	if len(mac) != sha1.Size {
		return false
	}
	base64.StdEncoding.Encode(enc[:], mac)
	if len(sig) != len(enc) {
		return false
	}
	var d byte
	for i := range enc {
		d |= enc[i] ^ sig[i]
	}
	return d == 0
}
