package main

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/caarlos0/env/v11"

	"github.com/stratamq/stratamq/broker"
	"github.com/stratamq/stratamq/infra/tlsconf"
	"github.com/stratamq/stratamq/remoting"
)

// TLSSettings are the STRATAMQ_TLS_* settings (issue 14 item 3), embedded
// in Config. The tools (admin, replay, bench) read the client half from
// the environment too (clientTLSFromEnv).
type TLSSettings struct {
	TLSMode               string `env:"TLS_MODE" help:"disabled | permissive | enforcing: TLS on the name server, broker and HA ports; permissive serves TLS and plain clients on the same port, enforcing closes plain ones (default: enforcing with STRATAMQ_TLS_CERT, else disabled)"`
	TLSCert               string `env:"TLS_CERT" help:"PEM certificate (chain) of the name server, broker, HA and, with STRATAMQ_HTTP_TLS, HTTP ports; reloaded when the file changes. Tools: their client certificate for mutual TLS"`
	TLSKey                string `env:"TLS_KEY" help:"PEM private key of STRATAMQ_TLS_CERT"`
	TLSClientCA           string `env:"TLS_CLIENT_CA" help:"PEM CA bundle: clients must present a certificate it signed (mutual TLS; on the HTTP port only checked when given)"`
	TLSClient             bool   `env:"TLS_CLIENT" help:"outgoing connections use TLS: the broker's to the name servers and a slave's to its master (always with STRATAMQ_TLS_MODE=enforcing), and the admin, replay and bench tools'"`
	TLSCA                 string `env:"TLS_CA" help:"PEM CA bundle that verifies the servers outgoing TLS connections reach (default: the system's roots, and for serve, broker and namesrv STRATAMQ_TLS_CERT's certificate itself)"`
	TLSInsecureSkipVerify bool   `env:"TLS_INSECURE_SKIP_VERIFY" help:"outgoing TLS connections accept any server certificate: for tests only"`
	HTTPTLS               bool   `env:"HTTP_TLS" help:"serve the HTTP port (metrics, health, console) over TLS with STRATAMQ_TLS_CERT"`
}

// tlsMaterial is what TLSSettings load to.
type tlsMaterial struct {
	server *tls.Config // nil: no server TLS
	mode   remoting.TLSMode
	http   *tls.Config // nil: plain HTTP
	client *tls.Config // nil: plain outgoing connections
}

// load checks the settings and reads their files; each error names the
// variable at fault. forServer: the command opens ports (serve, broker,
// namesrv), so a mode needs a certificate.
func (s TLSSettings) load(forServer bool) (tlsMaterial, error) {
	var m tlsMaterial
	mode, err := remoting.ParseTLSMode(s.TLSMode)
	if err != nil {
		return m, fmt.Errorf("STRATAMQ_TLS_MODE=%q: %v", s.TLSMode, err)
	}
	if s.TLSMode == "" && s.TLSCert != "" && forServer {
		mode = remoting.TLSEnforcing
	}
	if (s.TLSCert == "") != (s.TLSKey == "") {
		return m, errors.New("STRATAMQ_TLS_CERT and STRATAMQ_TLS_KEY: set both or neither")
	}
	if forServer {
		needCert := ""
		switch {
		case mode != remoting.TLSDisabled:
			needCert = "STRATAMQ_TLS_MODE=" + mode.String()
		case s.HTTPTLS:
			needCert = "STRATAMQ_HTTP_TLS"
		case s.TLSClientCA != "":
			needCert = "STRATAMQ_TLS_CLIENT_CA"
		}
		if needCert != "" && s.TLSCert == "" {
			return m, fmt.Errorf("%s needs STRATAMQ_TLS_CERT and STRATAMQ_TLS_KEY (PEM files)", needCert)
		}
		if s.TLSClientCA != "" && mode == remoting.TLSDisabled && !s.HTTPTLS {
			return m, errors.New("STRATAMQ_TLS_CLIENT_CA is set but STRATAMQ_TLS_MODE=disabled: nothing would check client certificates")
		}
	}
	if forServer && s.TLSCert != "" && (mode != remoting.TLSDisabled || s.HTTPTLS) {
		opts := tlsconf.ServerOptions{CertFile: s.TLSCert, KeyFile: s.TLSKey, ClientCAFile: s.TLSClientCA}
		if mode != remoting.TLSDisabled {
			if m.server, err = tlsconf.Server(opts); err != nil {
				return m, tlsFileError(s, err)
			}
			m.mode = mode
		}
		if s.HTTPTLS {
			opts.OptionalClientCert = true
			if m.http, err = tlsconf.Server(opts); err != nil {
				return m, tlsFileError(s, err)
			}
		}
	}
	if s.TLSClient || mode == remoting.TLSEnforcing {
		co := tlsconf.ClientOptions{CAFile: s.TLSCA, InsecureSkipVerify: s.TLSInsecureSkipVerify,
			CertFile: s.TLSCert, KeyFile: s.TLSKey, TrustOwnCert: forServer}
		if m.client, err = tlsconf.Client(co); err != nil {
			if s.TLSCA != "" {
				return m, fmt.Errorf("STRATAMQ_TLS_CA=%q: %v", s.TLSCA, err)
			}
			return m, tlsFileError(s, err)
		}
	}
	return m, nil
}

// tlsFileError names the variables behind a tlsconf error.
func tlsFileError(s TLSSettings, err error) error {
	vars := fmt.Sprintf("STRATAMQ_TLS_CERT=%q, STRATAMQ_TLS_KEY=%q", s.TLSCert, s.TLSKey)
	if s.TLSClientCA != "" {
		vars += fmt.Sprintf(", STRATAMQ_TLS_CLIENT_CA=%q", s.TLSClientCA)
	}
	return fmt.Errorf("%s: %v", vars, err)
}

// brokerTLS is the broker's share of m.
func (m tlsMaterial) brokerTLS() broker.TLS {
	return broker.TLS{Server: m.server, Mode: m.mode, Client: m.client}
}

// clientTLSFromEnv is the TLS config of a tool's connections (admin,
// replay, bench): nil unless STRATAMQ_TLS_CLIENT is set (or force).
func clientTLSFromEnv(environ map[string]string, force bool) (*tls.Config, error) {
	s, err := env.ParseAsWithOptions[TLSSettings](env.Options{Prefix: "STRATAMQ_", Environment: environ})
	if err != nil {
		return nil, envError(err, environ)
	}
	if !s.TLSClient && !force {
		return nil, nil
	}
	s.TLSClient = true
	s.TLSMode = "" // a tool opens no port
	m, err := s.load(false)
	if err != nil {
		return nil, err
	}
	return m.client, nil
}
