package slack

import (
	"context"
	"strings"

	"github.com/silas-gateway/silas/adapters/spec"
	"github.com/silas-gateway/silas/core/lease"
	"github.com/silas-gateway/silas/internal/doctor"
)

// SetDefaults sets the section to Defaults before the file is read.
func (c *Config) SetDefaults() { *c = Defaults() }

// Spec describes the adapter to serve, doctor and config check.
func (c *Config) Spec() spec.Spec {
	return spec.Spec{Name: "slack", Title: "Slack", Enabled: c.Enabled, DMPolicy: c.DMPolicy,
		Check: c.Check, Validate: c.Validate, Build: c.build, Doctor: c.doctor}
}

// build makes the channel and its metrics; in http mode it serves every
// path under /slack/ ahead of the loopback Host check, since Slack's
// requests come through a proxy and are authenticated by their signature.
func (c *Config) build(_ context.Context, d spec.Deps) (spec.Built, error) {
	cfg := *c
	cfg.State, cfg.Logger = d.State, d.Logger // threads the bot started survive a restart
	if ls, ok := d.State.(lease.Store); ok {
		cfg.Leases, cfg.Instance = ls, lease.InstanceID()
	}
	a, err := New(cfg)
	if err != nil {
		return spec.Built{}, err
	}
	if d.Metrics != nil {
		if err := a.RegisterMetrics(d.Metrics); err != nil {
			return spec.Built{}, err
		}
	}
	b := spec.Built{Channel: a}
	if h := a.Handler(); h != nil {
		b.Routes = append(b.Routes, spec.Route{Prefix: "/slack/", Handler: h})
	}
	return b, nil
}

// doctor runs Doctor when a bot token is configured.
func (c *Config) doctor(ctx context.Context, _ spec.Deps) []doctor.Finding {
	if strings.TrimSpace(c.BotToken) == "" {
		return doctor.Skipped("not configured (no slack.bot_token): skipped")
	}
	return Doctor(ctx, *c)
}
