package consent

import (
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/verify"
)

var lim = Limits{TTL: time.Hour, MaxTTL: 24 * time.Hour, MaxUses: 3}

func minted(t *testing.T, key ed25519.PrivateKey, a core.Action, now time.Time) Consent {
	t.Helper()
	c, err := ForAction("c1234567890", a, cards.RiskLow, "web:1", "web:owner", now, 0, lim)
	if err != nil {
		t.Fatal(err)
	}
	if err := Sign(key, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCheck(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	now := time.Date(2026, 11, 26, 16, 0, 0, 0, time.UTC)
	ls := core.Action{Tool: "shell", Argv: []string{"ls", "-l"}}
	base := minted(t, key, ls, now)
	tests := []struct {
		name   string
		edit   func(c *Consent)
		action core.Action
		risk   cards.Risk
		conv   string
		at     time.Time
		want   Code
	}{
		{name: "covers the exact action", want: ""},
		{name: "other argv", action: core.Action{Tool: "shell", Argv: []string{"ls", "-la"}}, want: Required},
		{name: "longer argv, not a prefix consent", action: core.Action{Tool: "shell", Argv: []string{"ls", "-l", "/"}}, want: Required},
		{name: "other secrets", action: core.Action{Tool: "shell", Argv: []string{"ls", "-l"}, Secrets: []string{"k"}}, want: Required},
		{name: "other conversation", conv: "web:2", want: Required},
		{name: "high risk always asks", risk: cards.RiskHigh, want: PolicyForbids},
		{name: "irreversible always asks", risk: cards.RiskIrreversible, want: PolicyForbids},
		{name: "medium above a low consent", risk: cards.RiskMedium, want: PolicyForbids},
		{name: "network lane", action: core.Action{Tool: "shell", Argv: []string{"ls", "-l"}, Network: true}, want: LaneDenied},
		{name: "revoked", edit: func(c *Consent) { c.RevokedAt = now }, want: Revoked},
		{name: "expired", at: now.Add(time.Hour), want: Expired},
		{name: "uses exhausted", edit: func(c *Consent) { c.Uses = 3 }, want: UsesExhausted},
		{name: "cost capped", edit: func(c *Consent) { c.Units = 3 }, want: CostCapped},
		{name: "edited: later expiry", edit: func(c *Consent) { c.ExpiresAt = c.ExpiresAt.Add(time.Hour) }, want: BadSignature},
		{name: "edited: higher cap", edit: func(c *Consent) { c.CostCap = 100 }, want: BadSignature},
		{name: "edited: more uses", edit: func(c *Consent) { c.MaxUses = 100 }, want: BadSignature},
		{name: "edited: wider prefix", edit: func(c *Consent) { c.Argv, c.Prefix = []string{"ls"}, true },
			action: core.Action{Tool: "shell", Argv: []string{"ls", "/etc"}}, want: BadSignature},
		{name: "edited: lanes", edit: func(c *Consent) { c.Lanes = []string{LaneOffline, LaneNetwork} },
			action: core.Action{Tool: "shell", Argv: []string{"ls", "-l"}, Network: true}, want: BadSignature},
		{name: "edited: shell argv never matches", edit: func(c *Consent) { c.Argv = []string{"sh", "-c", "ls"} },
			action: core.Action{Tool: "shell", Argv: []string{"sh", "-c", "ls"}}, want: Required},
		{name: "run consent is not a conversation's", edit: func(c *Consent) { c.Scope = ScopeRun }, want: BadSignature},
		{name: "counter matches the audit log", edit: func(c *Consent) { c.Uses, c.Units, c.AuditedUses, c.AuditedUnits = 2, 2, 2, 2 }, want: ""},
		{name: "edited: uses reset below the audit log", edit: func(c *Consent) { c.Uses, c.Units, c.AuditedUses, c.AuditedUnits = 0, 2, 2, 2 }, want: BadSignature},
		{name: "edited: units reset below the audit log", edit: func(c *Consent) { c.Uses, c.Units, c.AuditedUses, c.AuditedUnits = 2, 0, 2, 2 }, want: BadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			if tt.edit != nil {
				tt.edit(&c)
			}
			a, risk, conv, at := ls, cards.RiskLow, "web:1", now.Add(time.Minute)
			if tt.action.Tool != "" {
				a = tt.action
			}
			if tt.risk != "" {
				risk = tt.risk
			}
			if tt.conv != "" {
				conv = tt.conv
			}
			if !tt.at.IsZero() {
				at = tt.at
			}
			if got := c.Check(pub, a, risk, conv, at); got != tt.want {
				t.Fatalf("Check = %q, want %q", got, tt.want)
			}
			if tt.want != "" && tt.want.Words() == string(tt.want) {
				t.Fatalf("code %q has no plain words", tt.want)
			}
		})
	}
}

func TestRunConsentSignedIsRunMismatch(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	now := time.Now()
	a := core.Action{Tool: "shell", Argv: []string{"ls"}}
	c := minted(t, key, a, now)
	c.Scope, c.Run = ScopeRun, "run-a"
	if err := Sign(key, &c); err != nil {
		t.Fatal(err)
	}
	if got := c.Check(pub, a, cards.RiskLow, "web:1", now); got != RunMismatch {
		t.Fatalf("Check = %q, want %q", got, RunMismatch)
	}
}

func TestCoverable(t *testing.T) {
	for _, tt := range []struct {
		argv []string
		risk cards.Risk
		want bool
	}{
		{[]string{"ls"}, cards.RiskLow, true},
		{[]string{"git", "pull"}, cards.RiskMedium, true},
		{[]string{"ls"}, cards.RiskHigh, false},
		{[]string{"rm", "x"}, cards.RiskIrreversible, false},
		{[]string{"sh", "-c", "ls"}, cards.RiskLow, false},
		{[]string{"/bin/bash", "-c", "ls"}, cards.RiskLow, false},
		{[]string{"python3", "x.py"}, cards.RiskLow, false},
		{[]string{"env", "ls"}, cards.RiskLow, false},
		{[]string{"sudo", "ls"}, cards.RiskLow, false},
		{[]string{"xargs", "ls"}, cards.RiskLow, false},
	} {
		if got := Coverable(core.Action{Tool: "shell", Argv: tt.argv}, tt.risk); got != tt.want {
			t.Errorf("Coverable(%v, %s) = %v, want %v", tt.argv, tt.risk, got, tt.want)
		}
	}
}

func TestForActionBoundsTTL(t *testing.T) {
	now := time.Now()
	c, err := ForAction("c1", core.Action{Tool: "shell", Argv: []string{"ls"}}, cards.RiskLow, "w", "o", now, 48*time.Hour, lim)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.ExpiresAt.Sub(now); got > 24*time.Hour+time.Second {
		t.Fatalf("ttl %s above the maximum", got)
	}
	if _, err := ForAction("c2", core.Action{Tool: "shell", Argv: []string{"bash"}}, cards.RiskLow, "w", "o", now, 0, lim); err == nil {
		t.Fatal("a shell was covered")
	}
}

// Checks stored as jsonb come back re-spaced and re-ordered; the consent
// still covers the action and its signature still verifies.
func TestChecksSurviveJSONB(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	now := time.Now()
	a := core.Action{Tool: "shell", Argv: []string{"echo", "hi"}, Verify: []verify.Check{verify.ExitCodeZero()}}
	c := minted(t, key, a, now)
	c.Verify = []byte(`[{"expect": {"exit_code": 0},   "name": "exit code"}]`)
	if got := c.Check(pub, a, cards.RiskLow, "web:1", now); got != "" {
		t.Fatalf("Check = %q after a jsonb round trip", got)
	}
	other := a
	other.Verify = nil
	if got := c.Check(pub, other, cards.RiskLow, "web:1", now); got != Required {
		t.Fatalf("Check = %q for other checks, want %q", got, Required)
	}
}
