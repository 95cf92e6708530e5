package commands

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/core/store"
)

// The handlers against fakes of what they read and ask: what each answers
// from reads, and which ones leave their work to the turn's transaction
// (Write) instead of answering at once. The transactional halves run
// against PostgreSQL in the engine's tests (TestPairing, TestSecretLifecycle,
// the task tests).

// out is a fake of the turn's outcome.
type out struct {
	replies []string
	cards   []*cards.Card
	audit   []audit.Entry
	after   int
	write   func(ctx context.Context, tx *store.Tx, out Out) error
}

func (o *out) Reply(format string, a ...any) {
	o.replies = append(o.replies, fmt.Sprintf(format, a...))
}
func (o *out) Card(c *cards.Card)           { o.cards = append(o.cards, c) }
func (o *out) Update(c *cards.Card)         { o.cards = append(o.cards, c) }
func (o *out) Audit(entries ...audit.Entry) { o.audit = append(o.audit, entries...) }
func (o *out) After(func())                 { o.after++ }
func (o *out) Note(kind audit.Kind, data map[string]any) {
	o.audit = append(o.audit, audit.Entry{Kind: kind, Data: data})
}
func (o *out) Write(f func(context.Context, *store.Tx, Out) error) { o.write = f }
func (o *out) SecretOutput(text string)                            { o.replies = append(o.replies, "SECRET "+text) }

type reads struct {
	approvals map[core.ApprovalID]core.ApprovalRequest
	outputs   map[string]string
	secrets   []secrets.Info
	audit     []audit.Row
}

func (r *reads) OpenApprovals(_ context.Context, c core.ConversationID) ([]core.ApprovalRequest, error) {
	var list []core.ApprovalRequest
	for _, a := range r.approvals {
		if a.Conversation == c && a.Status.Open() {
			list = append(list, a)
		}
	}
	return list, nil
}

func (r *reads) GetApproval(_ context.Context, id core.ApprovalID) (core.ApprovalRequest, error) {
	if a, ok := r.approvals[id]; ok {
		return a, nil
	}
	return core.ApprovalRequest{}, core.ErrNotFound
}

func (r *reads) RequestedCommand(context.Context, core.ApprovalID) (string, error) {
	return "", core.ErrNotFound
}

func (r *reads) AuditTail(_ context.Context, n int, _ core.ConversationID, _ []audit.Kind) ([]audit.Row, error) {
	return r.audit[:min(n, len(r.audit))], nil
}

func (r *reads) GetConversationOutput(_ context.Context, _ core.ConversationID, ref string) (string, error) {
	if s, ok := r.outputs[ref]; ok {
		return s, nil
	}
	return "", core.ErrNotFound
}

func (r *reads) ListSecrets(context.Context) ([]secrets.Info, error) { return r.secrets, nil }

// decider: a request is intact unless its intent says "altered"; only the
// owner may decide.
type decider struct{}

func (decider) Intact(a core.ApprovalRequest) error {
	if strings.Contains(a.Intent, "altered") {
		return errors.New("altered")
	}
	return nil
}

func (decider) MayDecide(_ core.ApprovalRequest, who core.IdentityID, _ core.Trust) bool {
	return who == "web:owner"
}

type secureInput struct{ on bool }

func (s secureInput) Enabled() bool { return s.on }

func (s secureInput) Prepare(name, _ string, _ core.IdentityID, _ core.ConversationID, _ core.ChannelName) (secrets.Request, *cards.Card, error) {
	if name == "bad!" {
		return secrets.Request{}, nil, errors.New("bad name")
	}
	return secrets.Request{Ref: "ref-" + name, Name: name}, &cards.Card{ID: cards.ID("ref-" + name)}, nil
}

type trustBook struct{}

func (trustBook) Invalidate() {}

type taskList struct{}

func (taskList) List(context.Context, core.ConversationID) (string, error) {
	return "Tasks (newest first):", nil
}

func (taskList) Stop(context.Context, *store.Tx, core.StoredTurn, core.Trust, string, core.TaskOut) error {
	return nil
}

func newTable(t *testing.T, withRooms bool) *Table {
	t.Helper()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	act, _ := json.Marshal(core.Action{Tool: "shell", Argv: []string{"echo", "hi"}, Secrets: []string{"TOKEN"}})
	plain, _ := json.Marshal(core.Action{Tool: "shell", Argv: []string{"echo", "hi"}})
	r := &reads{
		approvals: map[core.ApprovalID]core.ApprovalRequest{
			"a1": {ID: "a1", Conversation: "web:c1", Intent: "Say hi", Risk: cards.RiskLow, Status: core.ApprovalPending, ExpiresAt: now.Add(time.Minute)},
			"a2": {ID: "a2", Conversation: "web:c1", Intent: "altered one", Status: core.ApprovalConfirming, ExpiresAt: now.Add(time.Minute)},
			"a3": {ID: "a3", Conversation: "web:c2", Intent: "elsewhere", Status: core.ApprovalApproved, ActionCanonical: act},
			"a4": {ID: "a4", Conversation: "web:c1", Intent: "ran", Status: core.ApprovalApproved, ActionCanonical: act},
			"a5": {ID: "a5", Conversation: "web:c1", Intent: "ran", Status: core.ApprovalApproved, ActionCanonical: plain},
		},
		outputs: map[string]string{"out-a4": strings.Repeat("x", 30), "out-a5": strings.Repeat("y", 30)},
		secrets: []secrets.Info{{Name: "TOKEN", UpdatedAt: now}},
	}
	cfg := Config{Reads: r, Decider: decider{}, Trust: trustBook{}, Key: key, OutputInlineMax: 10, Now: func() time.Time { return now }}
	if withRooms {
		cfg.SecureInput, cfg.Tasks = secureInput{on: true}, taskList{}
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAnswer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		text      string
		sender    core.IdentityID
		trust     core.Trust
		rooms     bool
		unhandled bool
		// reply is a substring of the one reply; "" expects no reply.
		reply string
		// write: the answer is left to the turn's transaction.
		write bool
		// noted is an audit kind the answer records.
		noted audit.Kind
	}{
		{name: "plain text goes to the agent", text: "hello", unhandled: true},
		{name: "/run goes to the agent", text: "/run uname", unhandled: true},
		{name: "unknown command", text: "/frobnicate now", reply: "Unknown command /frobnicate. Try /help."},
		{name: "help", text: "/help", reply: "/pair <code>"},
		{name: "whoami", text: "/whoami", sender: "web:owner", trust: core.TrustOwner, reply: "You are web:owner with owner trust."},
		{name: "pending lists open cards, altered ones as such", text: "/pending", reply: "2 open approval(s)"},
		{name: "audit with a bad count", text: "/audit many", reply: "Usage: /audit [n]"},
		{name: "audit with nothing to report", text: "/audit 5", reply: "Nothing to report yet."},
		{name: "output of another chat's card is unknown", text: "/output a3", sender: "web:owner", reply: "No stored output out-a3 in this chat."},
		{name: "output for someone who may not decide", text: "/output out-a4", sender: "web:guest", reply: "may not decide card a4", noted: audit.KindOutputRefused},
		{name: "output clipped", text: "/output a5", sender: "web:owner", reply: "Output out-a5, the first 10 of 30 characters", noted: audit.KindOutputShown},
		// Issue 22 point 1: the output of a run that received a secret is
		// not answered; a card asks the owner to show it (the tap shows it,
		// see core/engine TestSecretLifecycle).
		{name: "output of a run with a secret asks on a card", text: "/output a4", sender: "web:owner", write: true},
		{name: "output with a bad ref", text: "/output ../etc", reply: "Usage: /output <ref>"},
		{name: "secret needs an owner", text: "/secret TOKEN", trust: core.TrustAuth, rooms: true, reply: "Only an owner can ask for or delete a secret."},
		{name: "secret without the form", text: "/secret TOKEN", trust: core.TrustOwner, reply: "The secure form is not enabled"},
		{name: "secret usage", text: "/secret", trust: core.TrustOwner, rooms: true, reply: "Usage: /secret <name>"},
		{name: "secret with a bad name", text: "/secret bad!", trust: core.TrustOwner, rooms: true, reply: "I cannot ask for that: bad name."},
		{name: "secret asks in the turn's transaction", text: "/secret TOKEN the API token", trust: core.TrustOwner, rooms: true, write: true},
		{name: "secret delete in the turn's transaction", text: "/secret delete TOKEN", trust: core.TrustOwner, rooms: true, write: true},
		{name: "secrets needs an owner", text: "/secrets", trust: core.TrustAuth, reply: "Only an owner can list secrets."},
		{name: "secrets lists names only", text: "/secrets", trust: core.TrustOwner, reply: "1 secret(s) (names only):\n• TOKEN — stored"},
		{name: "tasks without the runtime", text: "/tasks", reply: "No tasks here yet."},
		{name: "tasks with the runtime", text: "/tasks", rooms: true, reply: "Tasks (newest first):"},
		{name: "stop without the runtime", text: "/stop", reply: "No running task here to stop."},
		{name: "stop in the turn's transaction", text: "/stop", rooms: true, write: true},
		{name: "pair without a code", text: "/pair", reply: "Usage: /pair <code>"},
		{name: "pair in the turn's transaction", text: "/pair@silas_bot abc123", write: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newTable(t, tt.rooms)
			st := core.StoredTurn{Seq: 7, Turn: core.Turn{Channel: "web", Conversation: "web:c1", Sender: tt.sender, Text: tt.text}}
			o := &out{}
			handled, err := c.Answer(context.Background(), Turn{StoredTurn: st, Trust: tt.trust}, o)
			if err != nil {
				t.Fatal(err)
			}
			if handled == tt.unhandled {
				t.Fatalf("handled = %v", handled)
			}
			switch {
			case tt.reply == "" && len(o.replies) != 0:
				t.Fatalf("replied %q, want no reply", o.replies)
			case tt.reply != "" && (len(o.replies) != 1 || !strings.Contains(o.replies[0], tt.reply)):
				t.Fatalf("replied %q, want one reply with %q", o.replies, tt.reply)
			}
			if (o.write != nil) != tt.write {
				t.Fatalf("left work to the transaction: %v, want %v", o.write != nil, tt.write)
			}
			if tt.noted != "" && (len(o.audit) != 1 || o.audit[0].Kind != tt.noted) {
				t.Fatalf("audit = %+v, want one %s", o.audit, tt.noted)
			}
		})
	}
}

// /pending names an altered request as such, never with its stored text.
func TestPendingDoesNotShowAlteredText(t *testing.T) {
	t.Parallel()
	o := &out{}
	st := core.StoredTurn{Turn: core.Turn{Conversation: "web:c1", Text: "/pending"}}
	if _, err := newTable(t, false).Answer(context.Background(), Turn{StoredTurn: st}, o); err != nil {
		t.Fatal(err)
	}
	if got := o.replies[0]; strings.Contains(got, "altered one") || !strings.Contains(got, "altered in storage or is unsigned; it cannot be approved (card a2)") ||
		!strings.Contains(got, "• Say hi — low risk, waiting for a tap, expires in 1m0s (card a1)") {
		t.Fatalf("/pending = %q", got)
	}
}
