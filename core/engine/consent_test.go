package engine_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/consent"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/render"
)

// sentChannel remembers the status each card had when it was first sent:
// a card sent pending is a card the person was asked to tap.
type sentChannel struct {
	*fakeChannel
	mu      sync.Mutex
	pending map[cards.ID]bool
}

func (s *sentChannel) Send(ctx context.Context, m core.OutMessage) (core.MessageRef, error) {
	if m.Card != nil && m.Card.Status.Open() {
		s.mu.Lock()
		s.pending[m.Card.ID] = true
		s.mu.Unlock()
	}
	return s.fakeChannel.Send(ctx, m)
}

func (s *sentChannel) asked(id cards.ID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending[id]
}

func setupStanding(t *testing.T, uses int) (*bundle, *sentChannel) {
	t.Helper()
	fc := newFakeChannel()
	sc := &sentChannel{fakeChannel: fc, pending: map[cards.ID]bool{}}
	b := setupAccess(t, sc, fc, "", func(c *gateway.Config) {
		c.Consents = consent.Limits{TTL: time.Hour, MaxTTL: 24 * time.Hour, MaxUses: uses}
	})
	return b, sc
}

func choiceIDs(c *cards.Card) []string {
	var ids []string
	for _, ch := range c.Choices {
		ids = append(ids, ch.ID)
	}
	return ids
}

func hasChoice(c *cards.Card, id string) bool {
	for _, ch := range c.Choices {
		if ch.ID == id {
			return true
		}
	}
	return false
}

// mint runs cmd and taps "Allow this for 1 h" on its card.
func (b *bundle) mintStanding(t *testing.T, cmd string) {
	t.Helper()
	b.send(t, owner, "/run "+cmd)
	c := b.pendingCard(t, cmd)
	if !hasChoice(c, render.StandingChoice) || c.Choices[len(c.Choices)-1].ID != "decline" {
		t.Fatalf("card offers %v, want the standing choice before decline", choiceIDs(c))
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	b.tap(t, owner, c.ID, render.StandingChoice)
	b.waitStatus(t, c.ID, cards.StatusDone)
}

// runCard sends /run cmd and returns the newest card for it once it is
// done or open (pending), and whether it was ever shown asking for a tap.
func (b *bundle) runCard(t *testing.T, sc *sentChannel, cmd string) (*cards.Card, bool) {
	t.Helper()
	before := map[cards.ID]bool{}
	for _, m := range b.ch.waitFor(t, "nothing", func([]core.OutMessage) bool { return true }) {
		if m.Card != nil {
			before[m.Card.ID] = true
		}
	}
	b.send(t, owner, "/run "+cmd)
	var c *cards.Card
	b.ch.waitFor(t, "a new card for "+cmd, func(msgs []core.OutMessage) bool {
		c = cardWith(msgs, func(c *cards.Card) bool {
			return !before[c.ID] && c.Command == cmd && (c.Status == cards.StatusDone || c.Status == cards.StatusPending)
		})
		return c != nil
	})
	return c, sc.asked(c.ID)
}

func (b *bundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := b.st.Pool().QueryRow(b.ctx, sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (b *bundle) consentRefusals(t *testing.T) []string {
	t.Helper()
	rows, err := b.st.AuditTail(b.ctx, 1000, "", []audit.Kind{audit.KindConsentRefused})
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, r := range rows {
		codes = append(codes, r.Entry.Data["code"].(string))
	}
	return codes
}

func TestStandingApprovalRunsWithoutCard(t *testing.T) {
	t.Parallel()
	b, sc := setupStanding(t, 2)
	b.mintStanding(t, "echo hi")
	if n := b.count(t, `SELECT count(*) FROM consents`); n != 1 {
		t.Fatalf("consents = %d, want 1", n)
	}
	tokens := b.count(t, `SELECT count(*) FROM token_nonces`)

	// The identical command runs at once, with a line instead of a card.
	c, asked := b.runCard(t, sc, "echo hi")
	if asked || c.Status != cards.StatusDone || c.Output != "hi\n" {
		t.Fatalf("second run: asked=%v card=%+v", asked, c)
	}
	b.ch.waitFor(t, "the standing line", func(msgs []core.OutMessage) bool {
		return textContaining(msgs, "under your standing approval") && textContaining(msgs, "1/2 uses")
	})
	if n := b.count(t, `SELECT count(*) FROM token_nonces`); n != tokens+1 {
		t.Fatalf("tokens consumed = %d, want one more than %d", n, tokens)
	}
	var by string
	var uses int
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT a.decided_by, c.uses FROM approvals a JOIN consents c ON a.decided_by = 'consent:' || c.id
		WHERE a.id = $1`, string(c.ID)).Scan(&by, &uses); err != nil || uses != 1 {
		t.Fatalf("approval decided by %q, uses %d: %v", by, uses, err)
	}
	// The token's audit entries name the consent.
	if n := b.count(t, `SELECT count(*) FROM audit_log WHERE kind = 'token.consumed' AND data->>'approval' = $1 AND data->>'consent' <> ''`, string(c.ID)); n != 1 {
		t.Fatalf("token.consumed naming the consent: %d", n)
	}

	// Another argv still asks.
	other, asked := b.runCard(t, sc, "echo ho")
	if !asked || other.Status != cards.StatusPending {
		t.Fatalf("other argv: asked=%v card=%+v", asked, other)
	}

	// The second use, then none left: the card again.
	if _, asked := b.runCard(t, sc, "echo hi"); asked {
		t.Fatal("second use asked")
	}
	last, asked := b.runCard(t, sc, "echo hi")
	if !asked || last.Status != cards.StatusPending {
		t.Fatalf("exhausted: asked=%v card=%+v", asked, last)
	}
	if codes := b.consentRefusals(t); !slicesContains(codes, string(consent.UsesExhausted)) {
		t.Fatalf("refusals %v, want %s", codes, consent.UsesExhausted)
	}
	if _, err := b.st.VerifyAudit(b.ctx); err != nil {
		t.Fatal(err)
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestStandingApprovalEndsAsks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		end  func(t *testing.T, b *bundle)
		code consent.Code
	}{
		{name: "revoked with /consents", code: consent.Revoked, end: func(t *testing.T, b *bundle) {
			b.send(t, owner, "/consents")
			var rc *cards.Card
			b.ch.waitFor(t, "the consent's card", func(msgs []core.OutMessage) bool {
				rc = cardWith(msgs, func(c *cards.Card) bool { return strings.HasPrefix(string(c.ID), render.ConsentCardPrefix) })
				return rc != nil
			})
			if err := rc.Validate(); err != nil || !hasChoice(rc, "revoke") {
				t.Fatalf("consent card %+v: %v", rc, err)
			}
			b.tap(t, "test:friend", rc.ID, "revoke") // not the owner: refused
			if n := b.count(t, `SELECT count(*) FROM consents WHERE revoked_at IS NULL`); n != 1 {
				t.Fatal("a non-owner revoked the consent")
			}
			b.tap(t, owner, rc.ID, "revoke")
			b.waitStatus(t, rc.ID, cards.StatusDeclined)
		}},
		{name: "expired", code: consent.Expired, end: func(t *testing.T, b *bundle) { b.clock.Add(61 * time.Minute) }},
		{name: "edited: later expiry", code: consent.BadSignature, end: func(t *testing.T, b *bundle) {
			b.count(t, `WITH u AS (UPDATE consents SET expires_at = expires_at + interval '1 hour' RETURNING 1) SELECT count(*) FROM u`)
		}},
		{name: "edited: wider prefix", code: consent.BadSignature, end: func(t *testing.T, b *bundle) {
			b.count(t, `WITH u AS (UPDATE consents SET prefix = true, argv = '{echo}' RETURNING 1) SELECT count(*) FROM u`)
		}},
		{name: "edited: more uses", code: consent.BadSignature, end: func(t *testing.T, b *bundle) {
			b.count(t, `WITH u AS (UPDATE consents SET max_uses = 1000, cost_cap = 1000 RETURNING 1) SELECT count(*) FROM u`)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, sc := setupStanding(t, 20)
			b.mintStanding(t, "echo hi")
			tt.end(t, b)
			c, asked := b.runCard(t, sc, "echo hi")
			if !asked || c.Status != cards.StatusPending {
				t.Fatalf("after %s: asked=%v card=%+v", tt.name, asked, c)
			}
			if codes := b.consentRefusals(t); !slicesContains(codes, string(tt.code)) {
				t.Fatalf("refusals %v, want %s", codes, tt.code)
			}
			if n := b.count(t, `SELECT coalesce(sum(uses), 0)::int FROM consents`); n != 0 {
				t.Fatalf("uses counted: %d", n)
			}
		})
	}
}

func TestStandingChoiceOffered(t *testing.T) {
	t.Parallel()
	b, _ := setupStanding(t, 20)
	for _, tt := range []struct {
		cmd   string
		risk  cards.Risk
		offer bool
	}{
		{"echo offered", cards.RiskLow, true},
		{"frobnicate --now", cards.RiskHigh, false},
		{"sh -c 'echo hi'", "", false},
		{"python3 -c 'print(1)'", "", false},
	} {
		b.send(t, owner, "/run "+tt.cmd)
		c := b.pendingCard(t, tt.cmd)
		if tt.risk != "" && c.Risk != tt.risk {
			t.Fatalf("%s: risk %s, want %s", tt.cmd, c.Risk, tt.risk)
		}
		if got := hasChoice(c, render.StandingChoice); got != tt.offer {
			t.Fatalf("%s (%s): standing choice offered = %v", tt.cmd, c.Risk, got)
		}
		if !tt.offer {
			// Tapping it anyway (a forged tap) is refused.
			b.tap(t, owner, c.ID, render.StandingChoice)
			if n := b.count(t, `SELECT count(*) FROM consents`); n != 0 {
				t.Fatalf("%s: a forged standing tap minted a consent", tt.cmd)
			}
		}
	}
	// Medium risk: offered once it asks for confirmation.
	b.send(t, owner, "/run touch made-by-silas")
	m := b.pendingCard(t, "touch made-by-silas")
	if m.Risk != cards.RiskMedium || hasChoice(m, render.StandingChoice) {
		t.Fatalf("medium pending card %+v", m)
	}
	b.tap(t, owner, m.ID, "approve")
	conf := b.waitStatus(t, m.ID, cards.StatusConfirming)
	if !hasChoice(conf, render.StandingChoice) {
		t.Fatalf("medium confirming card offers %v", choiceIDs(conf))
	}
	// Not the owner: refused, nothing minted.
	b.tap(t, "test:friend", m.ID, render.StandingChoice)
	if n := b.count(t, `SELECT count(*) FROM consents`); n != 0 {
		t.Fatal("a non-owner minted a consent")
	}
}
