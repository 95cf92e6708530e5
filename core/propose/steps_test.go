package propose_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"slices"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/propose"
	"github.com/silas-gateway/silas/core/route"
)

// stepTx is a step's transaction: what was queued in it.
type stepTx struct {
	tx
	msgs []core.OutboxOp
	conv []core.ConversationID
}

func (t *stepTx) QueueApproval(a core.ApprovalRequest) { t.rows[a.ID] = a }
func (t *stepTx) QueueMessage(_ core.ChannelName, op core.OutboxOp, _ string, m core.OutMessage) error {
	t.msgs, t.conv = append(t.msgs, op), append(t.conv, m.Conversation)
	return nil
}

type book struct{ trust core.Trust }

func (b book) Of(context.Context, core.Turn) (core.Trust, string) { return b.trust, "" }

type runs struct{ started, stopped []core.ApprovalID }

func (r *runs) Start(id core.ApprovalID)   { r.started = append(r.started, id) }
func (r *runs) Stop(ids []core.ApprovalID) { r.stopped = append(r.stopped, ids...) }

// A task's step proposes on /run's path inside its own transaction: the
// request carries its task, the card goes to the task's conversation, an
// allowed action is approved there and started only by Proposed.
func TestStepsPropose(t *testing.T) {
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
	origin := core.Turn{Channel: "web", Conversation: "web:c", Sender: "web:owner"}
	tests := []struct {
		name     string
		trust    core.Trust
		argv     []string
		proposed bool
		approved bool
		refused  string
	}{
		{name: "allowed: approved in the transaction", trust: core.TrustOwner, argv: []string{"echo", "hi"}, proposed: true, approved: true},
		{name: "needs a tap", trust: core.TrustOwner, argv: []string{"ls"}, proposed: true},
		{name: "blocked", trust: core.TrustOwner, argv: []string{"curl", "x"}, refused: "blocked by policy: no network tools"},
		{name: "untrusted", trust: core.TrustExternal, argv: []string{"echo", "hi"}, refused: "I can't run actions for you: your identity (web:owner) is not trusted here. The owner can pair it with `silas pair`."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := propose.New(propose.Config{Key: key, Policy: pol, Approver: &approver{}})
			if err != nil {
				t.Fatal(err)
			}
			r := &runs{}
			s := propose.Steps{Proposer: p, Trust: book{tt.trust}, Runs: r}
			tx := &stepTx{tx: tx{rows: map[core.ApprovalID]core.ApprovalRequest{}}}
			step, err := s.Propose(context.Background(), tx, "task-1", origin, core.ProposedAction{Action: core.Action{Tool: "shell", Argv: tt.argv}, Intent: "i"})
			if err != nil {
				t.Fatal(err)
			}
			if (step.Approval != "") != tt.proposed || step.Approved != tt.approved || step.Refused != tt.refused {
				t.Fatalf("step = %+v", step)
			}
			for _, e := range step.Audit {
				if e.Actor != string(origin.Sender) || e.Conversation != string(origin.Conversation) {
					t.Fatalf("audit entry in the wrong name: %+v", e)
				}
			}
			if !tt.proposed {
				if len(tx.rows) != 0 || len(tx.msgs) != 0 {
					t.Fatalf("a refused step queued %d requests, %d messages", len(tx.rows), len(tx.msgs))
				}
				return
			}
			if a := tx.rows[step.Approval]; a.Task != "task-1" || a.Conversation != origin.Conversation {
				t.Fatalf("request = task %q in %s", a.Task, a.Conversation)
			}
			if !slices.Equal(tx.msgs, []core.OutboxOp{core.OpSend}) || tx.conv[0] != origin.Conversation || step.Messages != 1 {
				t.Fatalf("queued %v to %v, counted %d", tx.msgs, tx.conv, step.Messages)
			}
			if len(r.started) != 0 {
				t.Fatal("started before commit")
			}
			s.Proposed(step)
			if want := tt.approved; (len(r.started) == 1 && r.started[0] == step.Approval) != want {
				t.Fatalf("started %v after commit, approved %v", r.started, want)
			}
		})
	}
}

// routesTx is a step's transaction that stores routes.
type routesTx struct {
	stepTx
	routes   []core.ApprovalRoute
	closed   []core.ApprovalID
	channels []core.ChannelName
	cards    []*cards.Card
}

func (t *routesTx) QueueMessage(ch core.ChannelName, op core.OutboxOp, k string, m core.OutMessage) error {
	t.channels, t.cards = append(t.channels, ch), append(t.cards, m.Card)
	return t.stepTx.QueueMessage(ch, op, k, m)
}
func (t *routesTx) QueueApprovalRoutes(r []core.ApprovalRoute) error {
	t.routes = append(t.routes, r...)
	return nil
}
func (t *routesTx) TransitionApproval(_ context.Context, id core.ApprovalID, _ []core.ApprovalStatus, _ core.ApprovalStatus, _ core.IdentityID, _ []byte) (bool, error) {
	t.closed = append(t.closed, id)
	return true, nil
}

type plans struct{ plan route.Plan }

func (p plans) Plan(context.Context, core.ApprovalRequest, core.Trust) (route.Plan, error) {
	return p.plan, nil
}

// A task's, flow's or outside agent's step whose card the requesting
// conversation cannot decide goes where a turn's /run card goes: the
// status card here and a copy in each approver's direct chat, or — no
// approver can receive it — refused at once with the reason, nothing
// stored to wait (issue 28).
func TestStepsRouted(t *testing.T) {
	t.Parallel()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	pol, err := policy.New([]policy.Rule{{Name: "default", Tool: "*", Decision: policy.AuthRequired, Risk: cards.RiskHigh}})
	if err != nil {
		t.Fatal(err)
	}
	origin := core.Turn{Channel: "slack", Conversation: "slack:C1", Sender: "slack:U2"}
	routed := route.Plan{Routed: true, Copies: []route.Target{{Channel: "telegram", Conversation: "telegram:1", Identity: "telegram:1"}}}
	refused := route.Plan{Refused: "no approver (telegram:1) has a direct conversation with Silas on any running channel"}
	tests := []struct {
		name string
		plan route.Plan
	}{
		{name: "routed", plan: routed},
		{name: "unroutable", plan: refused},
		{name: "here", plan: route.Plan{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := propose.New(propose.Config{Key: key, Policy: pol, Approver: &approver{}})
			if err != nil {
				t.Fatal(err)
			}
			s := propose.Steps{Proposer: p, Trust: book{core.TrustAuth}, Runs: &runs{}, Router: plans{tt.plan}}
			tx := &routesTx{stepTx: stepTx{tx: tx{rows: map[core.ApprovalID]core.ApprovalRequest{}}}}
			step, err := s.Propose(context.Background(), tx, "task-1", origin, core.ProposedAction{Action: core.Action{Tool: "shell", Argv: []string{"ls"}}, Intent: "i"})
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]bool{}
			for _, e := range step.Audit {
				kinds[string(e.Kind)] = true
			}
			switch tt.name {
			case "routed":
				if step.Approval == "" || len(tx.rows) != 1 || len(tx.routes) != 2 || !kinds["approval.routed"] {
					t.Fatalf("step %+v, %d requests, routes %+v", step, len(tx.rows), tx.routes)
				}
				if !slices.Equal(tx.channels, []core.ChannelName{"slack", "telegram"}) || !slices.Equal(tx.conv, []core.ConversationID{"slack:C1", "telegram:1"}) {
					t.Fatalf("sent to %v %v", tx.channels, tx.conv)
				}
				if len(tx.cards[0].Choices) != 0 || !strings.Contains(tx.cards[0].Outcome, "sent to telegram") || len(tx.cards[1].Choices) == 0 {
					t.Fatalf("status card %+v, copy %+v", tx.cards[0], tx.cards[1])
				}
			case "unroutable":
				if step.Approval != "" || len(tx.rows) != 0 || len(tx.msgs) != 0 || !kinds["approval.unroutable"] ||
					!strings.Contains(step.Refused, "Nobody can approve `ls` now: no approver (telegram:1)") {
					t.Fatalf("step %+v, %d requests, %d messages", step, len(tx.rows), len(tx.msgs))
				}
			case "here":
				if step.Approval == "" || len(tx.routes) != 0 || !slices.Equal(tx.conv, []core.ConversationID{"slack:C1"}) || len(tx.cards[0].Choices) == 0 {
					t.Fatalf("step %+v, routes %v, sent to %v", step, tx.routes, tx.conv)
				}
			}
		})
	}
}
