package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/consent"
	"github.com/silas-gateway/silas/core/gateway"
)

// tokenAgent is the command agent reporting that a model spent tokens on
// each proposal, as the LLM agent does.
type tokenAgent struct{ tokens int64 }

func (a tokenAgent) Respond(ctx context.Context, in core.AgentInput) (core.Proposal, error) {
	p, err := agent.Command{}.Respond(ctx, in)
	p.ModelTokens = a.tokens
	return p, err
}

// The model tokens that proposed an action run under a standing approval
// are charged to it in units (consents.tokens_per_unit), beside the
// action's unit: at 1 500 tokens a run costs 3 units, so a cap of 8 allows
// two runs and the third asks with its card, refused cost_capped — though
// uses are left.
func TestStandingApprovalChargesModelTokens(t *testing.T) {
	t.Parallel()
	fc := newFakeChannel()
	sc := &sentChannel{fakeChannel: fc, pending: map[cards.ID]bool{}}
	b := setupAccess(t, sc, fc, "", func(c *gateway.Config) {
		c.Consents = consent.Limits{TTL: time.Hour, MaxTTL: 24 * time.Hour, MaxUses: 20, CostCap: 8, TokensPerUnit: 1000}
		c.Agent = tokenAgent{tokens: 1500}
	})
	b.mintStanding(t, "echo hi")
	for i := 1; i <= 2; i++ {
		if c, asked := b.runCard(t, sc, "echo hi"); asked || c.Status != cards.StatusDone {
			t.Fatalf("run %d: asked=%v card=%+v", i, asked, c)
		}
	}
	if n := b.count(t, `SELECT units FROM consents`); n != 6 {
		t.Fatalf("units after two runs = %d, want 6", n)
	}
	if n := b.count(t, `SELECT count(*) FROM audit_log WHERE kind = 'consent.used' AND (data->>'model_tokens')::int = 1500`); n != 2 {
		t.Fatalf("uses audited with their model tokens = %d", n)
	}
	c, asked := b.runCard(t, sc, "echo hi")
	if !asked || c.Status != cards.StatusPending {
		t.Fatalf("third run: asked=%v card=%+v", asked, c)
	}
	if codes := b.consentRefusals(t); !slicesContains(codes, string(consent.CostCapped)) {
		t.Fatalf("refusals %v, want cost_capped", codes)
	}
	if n := b.count(t, `SELECT uses FROM consents`); n != 2 {
		t.Fatalf("uses = %d", n)
	}
}
