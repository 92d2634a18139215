package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// ReloadCheck is how often, at most, a handshake looks at the certificate
// and key files' modification times; a changed pair is loaded for the
// handshakes after it (a pair that fails to load keeps the old one).
const ReloadCheck = 5 * time.Second

// ServerOptions are a server port's files.
type ServerOptions struct {
	CertFile, KeyFile string // PEM; required
	// ClientCAFile, when set, makes the port require a client
	// certificate signed by one of its CAs (mutual TLS).
	ClientCAFile string
	// OptionalClientCert verifies a client certificate only when one is
	// given (the HTTP port: health probes carry none).
	OptionalClientCert bool
}

// Server loads opts' files and returns a server configuration whose
// certificate is reloaded when its files change.
func Server(opts ServerOptions) (*tls.Config, error) {
	if opts.CertFile == "" || opts.KeyFile == "" {
		return nil, errors.New("tlsconf: a server needs both a certificate and a key file")
	}
	kp, err := newKeyPair(opts.CertFile, opts.KeyFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return kp.get(), nil },
	}
	if opts.ClientCAFile != "" {
		pool, err := loadPool(opts.ClientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		if opts.OptionalClientCert {
			cfg.ClientAuth = tls.VerifyClientCertIfGiven
		}
	}
	return cfg, nil
}

// ClientOptions are an outgoing connection's settings.
type ClientOptions struct {
	// CAFile verifies servers; empty: the system's roots.
	CAFile string
	// InsecureSkipVerify accepts any server certificate: tests only.
	InsecureSkipVerify bool
	// CertFile and KeyFile, when both set, are presented to servers that
	// ask for a client certificate (mutual TLS).
	CertFile, KeyFile string
	// TrustOwnCert, with CertFile and no CAFile, also trusts CertFile's
	// certificate itself, next to the system's roots: a process reaching
	// its own server (serve's broker, its name server) with a self-signed
	// certificate. Only the holder of its key can present it.
	TrustOwnCert bool
}

// Client returns a client configuration.
func Client(opts ClientOptions) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: opts.InsecureSkipVerify}
	if opts.CAFile != "" {
		pool, err := loadPool(opts.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	} else if opts.TrustOwnCert && opts.CertFile != "" {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		pem, err := os.ReadFile(opts.CertFile)
		if err != nil {
			return nil, fmt.Errorf("tlsconf: certificate: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tlsconf: certificate file %s holds no PEM certificate", opts.CertFile)
		}
		cfg.RootCAs = pool
	}
	if opts.CertFile != "" && opts.KeyFile != "" {
		kp, err := newKeyPair(opts.CertFile, opts.KeyFile)
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return kp.get(), nil }
	}
	return cfg, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tlsconf: CA file %s holds no PEM certificate", file)
	}
	return pool, nil
}

// keyPair is a certificate and key loaded from files, reloaded when
// either file's size or modification time changes.
type keyPair struct {
	certFile, keyFile string

	mu struct {
		sync.Mutex
		cert      *tls.Certificate
		stamp     [2]fileStamp
		lastCheck time.Time
	}
}

type fileStamp struct {
	mod  time.Time
	size int64
}

func newKeyPair(certFile, keyFile string) (*keyPair, error) {
	kp := &keyPair{certFile: certFile, keyFile: keyFile}
	cert, stamp, err := kp.load()
	if err != nil {
		return nil, err
	}
	kp.mu.cert, kp.mu.stamp, kp.mu.lastCheck = cert, stamp, time.Now()
	return kp, nil
}

func (kp *keyPair) stamps() ([2]fileStamp, error) {
	var out [2]fileStamp
	for i, f := range []string{kp.certFile, kp.keyFile} {
		st, err := os.Stat(f)
		if err != nil {
			return out, err
		}
		out[i] = fileStamp{st.ModTime(), st.Size()}
	}
	return out, nil
}

func (kp *keyPair) load() (*tls.Certificate, [2]fileStamp, error) {
	stamp, err := kp.stamps()
	if err != nil {
		return nil, stamp, fmt.Errorf("tlsconf: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(kp.certFile, kp.keyFile)
	if err != nil {
		// LoadX509KeyPair's errors describe the PEM blocks, not their bytes.
		return nil, stamp, fmt.Errorf("tlsconf: certificate %s and key %s: %w", kp.certFile, kp.keyFile, err)
	}
	return &cert, stamp, nil
}

// get returns the current pair, reloading it first when ReloadCheck has
// passed since the last look and the files changed.
func (kp *keyPair) get() *tls.Certificate {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if time.Since(kp.mu.lastCheck) < ReloadCheck {
		return kp.mu.cert
	}
	kp.mu.lastCheck = time.Now()
	if st, err := kp.stamps(); err != nil || st == kp.mu.stamp {
		return kp.mu.cert
	}
	if cert, stamp, err := kp.load(); err == nil {
		kp.mu.cert, kp.mu.stamp = cert, stamp
	}
	return kp.mu.cert
}
