package propose_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/decide"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/propose"
	"github.com/silas-gateway/silas/core/verify"
)

// approver records what the proposer asked it to approve.
type approver struct {
	a  core.ApprovalRequest
	by core.IdentityID
}

func (r *approver) Approve(_ context.Context, _ decide.Tx, a core.ApprovalRequest, by core.IdentityID) (decide.Result, error) {
	r.a, r.by = a, by
	return decide.Result{Queued: a.ID}, nil
}

// tx holds the requests queued in it, as the caller's transaction would.
type tx struct {
	decide.Tx
	rows map[core.ApprovalID]core.ApprovalRequest
}

func (t tx) GetApproval(_ context.Context, id core.ApprovalID) (core.ApprovalRequest, error) {
	a, ok := t.rows[id]
	if !ok {
		return a, core.ErrNotFound
	}
	return a, nil
}

func TestPropose(t *testing.T) {
	t.Parallel()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	pol, err := policy.New([]policy.Rule{
		{Name: "echo", Tool: "shell", Match: `^echo `, Decision: policy.Allow, Risk: cards.RiskLow},
		{Name: "no-curl", Tool: "shell", Match: `^curl `, Decision: policy.Blocked, Risk: cards.RiskHigh, Reason: "no network tools"},
		{Name: "default", Tool: "*", Decision: policy.AuthRequired, Risk: cards.RiskMedium},
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ap := &approver{}
	p, err := propose.New(propose.Config{Key: key, Policy: pol, Approver: ap, ApprovalTTL: time.Minute, Preview: 100,
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	st := core.StoredTurn{Seq: 7, Turn: core.Turn{Channel: "test", Conversation: "test:chat", Sender: "test:alice"}}
	shell := func(argv ...string) core.ProposedAction {
		return core.ProposedAction{Action: core.Action{Tool: "shell", Argv: argv, Verify: []verify.Check{verify.ExitCodeZero()}},
			Intent: "do it", Rationale: "asked"}
	}
	badCheck := shell("ls")
	badCheck.Action.Verify = []verify.Check{{Run: []string{""}}}
	tests := []struct {
		name     string
		trust    core.Trust
		pa       core.ProposedAction
		proposed bool
		auto     string
		decision string
		reply    string // a substring of the reply
		refused  string // a substring of Refused
		notes    []audit.Kind
	}{
		{name: "external trust", trust: core.TrustExternal, pa: shell("ls"), decision: "external", reply: "not trusted here",
			refused: "not trusted here", notes: []audit.Kind{audit.KindPolicyRefused}},
		{name: "incomplete", trust: core.TrustOwner, pa: core.ProposedAction{Action: core.Action{Tool: "shell"}}, reply: "incomplete",
			refused: "incomplete"},
		{name: "invalid check", trust: core.TrustOwner, pa: badCheck, reply: "Verification check 1 is invalid", refused: "check 1"},
		{name: "blocked", trust: core.TrustOwner, pa: shell("curl", "x"), decision: "blocked", reply: "Blocked: `curl x` — no network tools",
			refused: "blocked by policy: no network tools", notes: []audit.Kind{audit.KindPolicyDecided}},
		{name: "needs approval", trust: core.TrustAuth, pa: shell("ls", "-l"), proposed: true, decision: "auth_required",
			notes: []audit.Kind{audit.KindPolicyDecided, audit.KindApprovalRequested}},
		{name: "allowed", trust: core.TrustOwner, pa: shell("echo", "hi"), proposed: true, auto: "echo", decision: "allow",
			notes: []audit.Kind{audit.KindPolicyDecided, audit.KindApprovalRequested}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := p.Propose(st, tt.trust, tt.pa)
			if (got.Request != nil) != tt.proposed || got.Auto != tt.auto || got.Decision != tt.decision {
				t.Fatalf("proposal = %+v", got)
			}
			if !strings.Contains(got.Reply, tt.reply) || !strings.Contains(got.Refused, tt.refused) || (tt.proposed && got.Reply+got.Refused != "") {
				t.Fatalf("reply %q, refused %q", got.Reply, got.Refused)
			}
			if len(got.Notes) != len(tt.notes) {
				t.Fatalf("notes = %+v, want kinds %v", got.Notes, tt.notes)
			}
			for i, n := range got.Notes {
				if n.Kind != tt.notes[i] {
					t.Fatalf("note %d = %s, want %s", i, n.Kind, tt.notes[i])
				}
			}
			if !tt.proposed {
				if got.Card != nil {
					t.Fatalf("a card for a refusal: %+v", got.Card)
				}
				return
			}
			a := *got.Request
			if err := decide.RequestIntact(key.Public().(ed25519.PublicKey), a); err != nil {
				t.Fatalf("request not signed as proposed: %v", err)
			}
			if a.Status != core.ApprovalPending || a.TurnSeq != 7 || a.Requester != "test:alice" || a.Conversation != "test:chat" ||
				!a.ExpiresAt.Equal(now.Add(time.Minute)) || got.Card == nil || got.Card.ID != cards.ID(a.ID) {
				t.Fatalf("request %+v, card %+v", a, got.Card)
			}
			r, err := p.Approve(context.Background(), tx{rows: map[core.ApprovalID]core.ApprovalRequest{a.ID: a}}, got)
			if tt.auto == "" {
				if err == nil {
					t.Fatal("a proposal a person must decide was approved on the policy's behalf")
				}
				return
			}
			if err != nil || r.Queued != a.ID || ap.by != "policy:echo" || ap.a.ID != a.ID || len(a.Approvers) != 1 || a.Approvers[0] != "policy:echo" {
				t.Fatalf("approve: %+v, %v; approver got %+v by %s", r, err, ap.a, ap.by)
			}
		})
	}
}

// TestApproveUnqueued: the request is read back from the transaction; one
// not queued there is an error, not an approval.
func TestApproveUnqueued(t *testing.T) {
	t.Parallel()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	pol, _ := policy.New([]policy.Rule{{Name: "all", Tool: "*", Decision: policy.Allow, Risk: cards.RiskLow}})
	ap := &approver{}
	p, _ := propose.New(propose.Config{Key: key, Policy: pol, Approver: ap})
	got := p.Propose(core.StoredTurn{Turn: core.Turn{Channel: "test", Conversation: "c", Sender: "s"}}, core.TrustOwner,
		core.ProposedAction{Action: core.Action{Tool: "shell", Argv: []string{"true"}}})
	if got.Auto != "all" {
		t.Fatalf("proposal = %+v", got)
	}
	if _, err := p.Approve(context.Background(), tx{}, got); err == nil || ap.by != "" {
		t.Fatalf("approved a request not in the transaction: %v", err)
	}
}

// TestLongPreviewLinksToTheSecurePage: a preview longer than a card shows
// is stored and signed whole; its card shows the first part and links to
// the secure page with all of it. A short one has no link, and neither
// has any card while the secure form does not run.
func TestLongPreviewLinksToTheSecurePage(t *testing.T) {
	t.Parallel()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	pol, err := policy.New([]policy.Rule{{Name: "default", Tool: "*", Decision: policy.AuthRequired, Risk: cards.RiskMedium}})
	if err != nil {
		t.Fatal(err)
	}
	link := ""
	p, err := propose.New(propose.Config{Key: key, Policy: pol, Approver: &approver{},
		PreviewLink: func(id core.ApprovalID) string {
			if link == "" {
				return ""
			}
			return link + string(id)
		}})
	if err != nil {
		t.Fatal(err)
	}
	st := core.StoredTurn{Seq: 1, Turn: core.Turn{Channel: "test", Conversation: "test:chat", Sender: "test:alice"}}
	long := core.ProposedAction{Action: core.Action{Tool: "shell", Argv: append([]string{"printf"}, strings.Split(strings.Repeat("argument ", 400), " ")...),
		Verify: []verify.Check{verify.ExitCodeZero()}}, Intent: "print", Rationale: "asked"}
	short := core.ProposedAction{Action: core.Action{Tool: "shell", Argv: []string{"ls"}, Verify: []verify.Check{verify.ExitCodeZero()}}, Intent: "list"}

	got := p.Propose(st, core.TrustAuth, long)
	if got.Card == nil || got.Card.Link != nil {
		t.Fatalf("a link without the secure form: %+v", got.Card)
	}
	link = "https://secure.example/preview/"
	got = p.Propose(st, core.TrustAuth, long)
	a := *got.Request
	if len([]rune(a.Preview)) <= 1500 || !strings.Contains(a.Preview, "Argument 400") {
		t.Fatalf("stored preview (%d characters) is not whole", len([]rune(a.Preview)))
	}
	if err := decide.RequestIntact(key.Public().(ed25519.PublicKey), a); err != nil {
		t.Fatalf("the whole preview is not what was signed: %v", err)
	}
	c := got.Card
	if c.Link == nil || c.Link.URL != link+string(a.ID) || c.Link.Label != "Full preview" || strings.Contains(c.Details, "Argument 400") ||
		!strings.Contains(c.Details, "all of it is on the secure page") {
		t.Fatalf("card link %+v, details %d characters", c.Link, len([]rune(c.Details)))
	}
	if got := p.Propose(st, core.TrustAuth, short); got.Card.Link != nil {
		t.Fatalf("a short preview links to the page: %+v", got.Card.Link)
	}
}
