package webchat

import (
	"context"
	"fmt"
	"io"

	"github.com/silas-gateway/silas/adapters/spec"
	"github.com/silas-gateway/silas/internal/doctor"
)

// SetDefaults sets the section to Defaults before the file is read.
func (c *Config) SetDefaults() { *c = Defaults() }

// Spec describes the adapter to serve, doctor and config check. It has no
// DM policy: the page answers only its own logged-in browser.
func (c *Config) Spec() spec.Spec {
	return spec.Spec{Name: "webchat", Title: "Web chat", Enabled: c.Enabled,
		Check: c.Check, Build: c.build, Doctor: c.doctor}
}

// build makes the channel. Serve's state store is the core's storage,
// which also keeps the conversation, the long outputs the page reads and
// the logins and sessions (HistoryReader, OutputSource, SessionStore);
// without them (tests) the adapter keeps
// its history in memory. The page and its socket are served at "/", the
// least specific pattern, behind the loopback Host check.
func (c *Config) build(_ context.Context, d spec.Deps) (spec.Built, error) {
	cfg := *c
	cfg.State, cfg.Logger = d.State, d.Logger
	if h, ok := d.State.(HistoryReader); ok {
		cfg.Transcript = h
	}
	if o, ok := d.State.(OutputSource); ok {
		cfg.Outputs = o
	}
	if ss, ok := d.State.(SessionStore); ok {
		cfg.Sessions = ss
	}
	if d.Peers != nil {
		cfg.Peers = d.Peers
	}
	a, err := New(cfg)
	if err != nil {
		return spec.Built{}, err
	}
	return spec.Built{Channel: a, Routes: []spec.Route{{Pattern: "/", Handler: a}}, Banner: func(w io.Writer, addr string) {
		fmt.Fprintf(w, "\nSilas web chat: %s/#login=%s\n(one-time login link, valid %s; restart for a new one)\n\n",
			addr, a.NewLoginSecret(c.LoginTTL), c.LoginTTL)
	}}, nil
}

// doctor says who the page speaks as; there is nothing outside this
// process to check.
func (c *Config) doctor(context.Context, spec.Deps) []doctor.Finding {
	if !c.Enabled {
		return doctor.Skipped("not enabled (webchat.enabled): skipped")
	}
	return []doctor.Finding{{Severity: doctor.OK, Check: "config", Message: fmt.Sprintf(
		"served on http.listen; the browser speaks as %s, a login lasts %s (`silas serve` prints a one-time login link valid %s)",
		c.Identity, c.SessionTTL, c.LoginTTL)}}
}
