package acl

import "github.com/stratamq/stratamq/remoting"

// SignatureOK reports whether sig is the signature of a request with
// extFields pairs and body under secret, as CheckBroker verifies it (the
// Java and the Go clients' content both). It sorts pairs in place. For
// the users of ACL 2.0 (package acl2), whose clients sign the same way.
func SignatureOK(pairs []remoting.ExtField, body []byte, secret Secret, sig string) bool {
	a := &account{secret: secret}
	return a.signatureOK(pairs, body, sig)
}
