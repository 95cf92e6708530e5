package config

import (
	"net/url"
	"strings"
)

// Telemetry configures OpenTelemetry traces (docs/operations.md,
// "Tracing"). Prometheus /metrics is always on and configured nowhere.
type Telemetry struct {
	Tracing Tracing `yaml:"tracing"`
}

// Tracing is the OTLP/HTTP trace export. Off unless exporter_url (or the
// standard OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// variables) names a collector; when off, no SDK is started and every span
// is a no-op.
type Tracing struct {
	// ExporterURL is the collector's OTLP/HTTP address, e.g.
	// http://localhost:4318 (the path /v1/traces is added when none is
	// given). "" leaves it to the OTEL_* variables, and off without them.
	ExporterURL string `yaml:"exporter_url"`
	// SamplingRatePerMillion is how many traces in a million are kept
	// (1–1000000; parent-based: a trace sampled upstream stays sampled).
	// 0 means every trace, unless OTEL_TRACES_SAMPLER says otherwise.
	SamplingRatePerMillion int `yaml:"sampling_rate_per_million"`
}

func (c *Config) checkTelemetry() error {
	t := c.Telemetry.Tracing
	if t.ExporterURL != "" {
		u, err := url.Parse(t.ExporterURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("telemetry.tracing.exporter_url", "%q must be an http:// or https:// URL", t.ExporterURL)
		}
		if u.User != nil || strings.Contains(u.RawQuery, "token") {
			return bad("telemetry.tracing.exporter_url", "must not carry credentials (set OTEL_EXPORTER_OTLP_HEADERS instead)")
		}
	}
	if t.SamplingRatePerMillion < 0 || t.SamplingRatePerMillion > 1_000_000 {
		return bad("telemetry.tracing.sampling_rate_per_million", "%d must be between 0 and 1000000", t.SamplingRatePerMillion)
	}
	return nil
}
