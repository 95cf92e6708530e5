package discord

import (
	"context"

	"github.com/silas-gateway/silas/adapters/spec"
	"github.com/silas-gateway/silas/core/lease"
	"github.com/silas-gateway/silas/internal/doctor"
)

// SetDefaults sets the section to Defaults before the file is read.
func (c *Config) SetDefaults() { *c = Defaults() }

// Spec describes the adapter to serve, doctor and config check.
func (c *Config) Spec() spec.Spec {
	return spec.Spec{Name: "discord", Title: "Discord", Enabled: c.Enabled, DMPolicy: c.DMPolicy,
		Check: c.Check, Validate: c.Validate, Build: c.build, Doctor: c.doctor}
}

// build makes the channel; in http mode it serves the interactions
// endpoint.
func (c *Config) build(_ context.Context, d spec.Deps) (spec.Built, error) {
	cfg := *c
	cfg.State, cfg.Logger = d.State, d.Logger
	if ls, ok := d.State.(lease.StateStore); ok {
		cfg.Leases, cfg.Instance = ls, lease.InstanceID()
	}
	a, err := New(cfg)
	if err != nil {
		return spec.Built{}, err
	}
	b := spec.Built{Channel: a}
	if p := a.InteractionsPath(); p != "" {
		b.Routes = append(b.Routes, spec.Route{Pattern: "POST " + p, Handler: a})
	}
	return b, nil
}

// doctor runs Doctor when the channel is enabled.
func (c *Config) doctor(ctx context.Context, _ spec.Deps) []doctor.Finding {
	if !c.Enabled {
		return doctor.Skipped("not enabled (discord.enabled): skipped")
	}
	return Doctor(ctx, *c)
}
