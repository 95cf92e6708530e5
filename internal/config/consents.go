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
	// CostCap is a standing approval's cost cap in units: one per run,
	// plus the model tokens of the LLM call that proposed it
	// (tokens_per_unit). 0: max_uses × 11 (each run and up to 10 000
	// tokens at the default rate).
	CostCap int `yaml:"cost_cap"`
	// TokensPerUnit is how many model tokens cost one unit (0: model calls
	// are not charged). Default 1000.
	TokensPerUnit int `yaml:"tokens_per_unit"`
}

// Cap is consents.cost_cap, or its default.
func (k Consents) Cap() int {
	if k.CostCap > 0 {
		return k.CostCap
	}
	return k.MaxUses * 11
}

func (c *Config) setConsentDefaults() {
	c.Consents.DefaultTTL = Duration{time.Hour}
	c.Consents.MaxTTL = Duration{24 * time.Hour}
	c.Consents.MaxUses = 20
	c.Consents.TokensPerUnit = 1000
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
	if k.CostCap < 0 || k.CostCap > 1_000_000 {
		return bad("consents.cost_cap", "%d must be between 0 (the default) and 1000000 units", k.CostCap)
	}
	if k.TokensPerUnit < 0 {
		return bad("consents.tokens_per_unit", "%d must be 0 (model calls not charged) or more", k.TokensPerUnit)
	}
	return nil
}
