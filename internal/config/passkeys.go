package config

import "time"

// Passkeys configures the passkey step-up of irreversible actions
// (docs/passkeys.md, core/stepup). The pages live on the secure form
// (secrets_web), so passkeys work only where it is enabled and its
// public_url names a host browsers accept as a WebAuthn relying party (a
// domain name or localhost, never an IP address).
type Passkeys struct {
	// RPID is the WebAuthn relying party id; "" means secrets_web.public_url's
	// host. A parent domain of that host is allowed (passkeys registered for
	// example.com work on secrets.example.com); changing it later strands
	// every registered passkey.
	RPID string `yaml:"rp_id"`
	// StepUpTTL is how long a "Confirm with passkey" link works (default 5m).
	StepUpTTL Duration `yaml:"step_up_ttl"`
	// EnrollTTL is how long a `silas passkey add` link works (default 15m).
	EnrollTTL Duration `yaml:"enroll_ttl"`
}

func (c *Config) checkPasskeys() error {
	p := &c.Passkeys
	if p.StepUpTTL.Duration == 0 {
		p.StepUpTTL = Duration{5 * time.Minute}
	}
	if p.EnrollTTL.Duration == 0 {
		p.EnrollTTL = Duration{15 * time.Minute}
	}
	if p.StepUpTTL.Duration < 30*time.Second || p.StepUpTTL.Duration > 15*time.Minute {
		return bad("passkeys.step_up_ttl", "%s must be between 30s and 15m", p.StepUpTTL.Duration)
	}
	if p.EnrollTTL.Duration < time.Minute || p.EnrollTTL.Duration > 24*time.Hour {
		return bad("passkeys.enroll_ttl", "%s must be between 1m and 24h", p.EnrollTTL.Duration)
	}
	return nil
}
