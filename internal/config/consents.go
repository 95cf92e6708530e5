package config

import "time"

// Consents configures standing approvals (docs/approvals.md, "Standing
// approvals"): an owner's "Allow this for 1 h" on an approval card.
type Consents struct {
	// Enabled offers the standing choice on low-risk (and, once asked to
	// confirm, medium-risk) approval cards and lets covered actions run
	// without a card. Off by default.
	Enabled bool `yaml:"enabled"`
	// DefaultTTL is how long a standing approval lasts (1m–max_ttl).
	DefaultTTL Duration `yaml:"default_ttl"`
	// MaxTTL is the longest a standing approval may last (at most 24h).
	MaxTTL Duration `yaml:"max_ttl"`
	// MaxUses is how many runs one standing approval allows (1–1000).
	MaxUses int `yaml:"max_uses"`
}

func (c *Config) setConsentDefaults() {
	c.Consents.DefaultTTL = Duration{time.Hour}
	c.Consents.MaxTTL = Duration{24 * time.Hour}
	c.Consents.MaxUses = 20
}

func (c *Config) checkConsents() error {
	k := c.Consents
	if k.MaxTTL.Duration < time.Minute || k.MaxTTL.Duration > 24*time.Hour {
		return bad("consents.max_ttl", "%s must be between 1m and 24h", k.MaxTTL.Duration)
	}
	if k.DefaultTTL.Duration < time.Minute || k.DefaultTTL.Duration > k.MaxTTL.Duration {
		return bad("consents.default_ttl", "%s must be between 1m and consents.max_ttl (%s)", k.DefaultTTL.Duration, k.MaxTTL.Duration)
	}
	if k.MaxUses < 1 || k.MaxUses > 1000 {
		return bad("consents.max_uses", "%d must be between 1 and 1000", k.MaxUses)
	}
	return nil
}
