package tlsconf

import (
	"bytes"
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stratamq/stratamq/infra/tlsconf/tlstest"
)

// copyFile copies src over dst and moves dst's modification time to at.
func copyFile(t *testing.T, src, dst string, at time.Time) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(dst, at, at); err != nil {
		t.Fatal(err)
	}
}

// TestTLSConfReload: a changed certificate and key are served from the
// next check on; a pair that does not load keeps the old one.
func TestTLSConfReload(t *testing.T) {
	a, b := tlstest.Write(t, t.TempDir()), tlstest.Write(t, t.TempDir())
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	now := time.Now()
	copyFile(t, a.Cert, cert, now.Add(-time.Hour))
	copyFile(t, a.Key, key, now.Add(-time.Hour))
	kp, err := newKeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	first := kp.get()
	leaf := func(c *tls.Certificate) []byte { return c.Certificate[0] }

	copyFile(t, b.Cert, cert, now)
	copyFile(t, b.Key, key, now)
	if got := kp.get(); !bytes.Equal(leaf(got), leaf(first)) {
		t.Fatal("reloaded before ReloadCheck passed")
	}
	kp.mu.Lock()
	kp.mu.lastCheck = time.Time{}
	kp.mu.Unlock()
	second := kp.get()
	if bytes.Equal(leaf(second), leaf(first)) {
		t.Fatal("the new certificate was not loaded")
	}

	// A key that does not match: the second pair stays.
	copyFile(t, a.Key, key, now.Add(time.Minute))
	kp.mu.Lock()
	kp.mu.lastCheck = time.Time{}
	kp.mu.Unlock()
	if got := kp.get(); !bytes.Equal(leaf(got), leaf(second)) {
		t.Fatal("a mismatched pair replaced the working one")
	}
}

// TestTLSConfErrors: missing files and non-PEM CA bundles are errors that
// name the file.
func TestTLSConfErrors(t *testing.T) {
	f := tlstest.Write(t, t.TempDir())
	missing := filepath.Join(t.TempDir(), "nope.pem")
	for name, fn := range map[string]func() error{
		"no key":       func() error { _, err := Server(ServerOptions{CertFile: f.Cert}); return err },
		"missing cert": func() error { _, err := Server(ServerOptions{CertFile: missing, KeyFile: f.Key}); return err },
		"CA not PEM": func() error {
			_, err := Server(ServerOptions{CertFile: f.Cert, KeyFile: f.Key, ClientCAFile: f.Key})
			return err
		},
		"client CA":      func() error { _, err := Client(ClientOptions{CAFile: missing}); return err },
		"client keypair": func() error { _, err := Client(ClientOptions{CertFile: f.Cert, KeyFile: f.ClientKey}); return err },
	} {
		if err := fn(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	cfg, err := Server(ServerOptions{CertFile: f.Cert, KeyFile: f.Key, ClientCAFile: f.CA})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS12 || cfg.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatalf("server config: min version %x, client auth %v", cfg.MinVersion, cfg.ClientAuth)
	}
}
