package telegram

import (
	"context"
	"net/url"

	"github.com/silas-gateway/silas/adapters/spec"
	"github.com/silas-gateway/silas/core/lease"
	"github.com/silas-gateway/silas/internal/doctor"
)

// SetDefaults sets the section to Defaults before the file is read.
func (c *Config) SetDefaults() { *c = Defaults() }

// Spec describes the adapter to serve, doctor and config check.
func (c *Config) Spec() spec.Spec {
	return spec.Spec{Name: "telegram", Title: "Telegram", Enabled: c.Enabled, DMPolicy: c.DMPolicy,
		Check: c.Check, Validate: c.Validate, Build: c.build, Doctor: c.doctor}
}

// build makes the channel; in webhook mode it serves the webhook path and
// lets the webhook URL's public name through the loopback Host check.
func (c *Config) build(_ context.Context, d spec.Deps) (spec.Built, error) {
	cfg := *c
	cfg.State, cfg.Logger = d.State, d.Logger
	if ls, ok := d.State.(LeaseStore); ok {
		cfg.Leases, cfg.Instance = ls, lease.InstanceID()
	}
	a, err := New(cfg)
	if err != nil {
		return spec.Built{}, err
	}
	b := spec.Built{Channel: a}
	if p := a.WebhookPath(); p != "" {
		b.Routes = append(b.Routes, spec.Route{Pattern: p, Handler: a})
	}
	if u, err := url.Parse(c.WebhookURL); err == nil && u.Host != "" {
		b.Hosts = append(b.Hosts, u.Host, u.Hostname())
	}
	return b, nil
}

// doctor runs Doctor when a token is configured (doctor's --telegram-*
// flags may have set one on a disabled channel, to check it first).
func (c *Config) doctor(ctx context.Context, _ spec.Deps) []doctor.Finding {
	if c.Token == "" {
		return doctor.Skipped("not configured (no telegram.token): skipped")
	}
	return Doctor(ctx, *c)
}
