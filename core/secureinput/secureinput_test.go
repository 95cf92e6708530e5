package secureinput

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

type kicks struct {
	mu sync.Mutex
	n  map[core.ConversationID]int
}

func (k *kicks) Kick(c core.ConversationID, n int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.n[c] += n
}

type bundle struct {
	st     *store.Store
	r      *Requests
	kicks  *kicks
	tokens map[string]string // ref → link token, as the link carried it
}

func setup(t *testing.T, sealing, form bool) *bundle {
	t.Helper()
	st, err := store.Open(context.Background(), storetest.NewDatabase(t), store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	b := &bundle{st: st, kicks: &kicks{n: map[core.ConversationID]int{}}, tokens: map[string]string{}}
	b.r, err = New(Config{Store: st, Outbox: b.kicks, Sealing: sealing, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if form {
		b.r.SetLink(func(ref, token string) string {
			b.tokens[ref] = token
			return "https://form.example/secrets/" + ref + "?t=" + token
		})
	}
	return b
}

func (b *bundle) outbox(t *testing.T) (ops []string, msgs []core.OutMessage) {
	t.Helper()
	rows, err := b.st.Pool().Query(context.Background(), `SELECT op, payload FROM outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var op string
		var raw []byte
		if err := rows.Scan(&op, &raw); err != nil {
			t.Fatal(err)
		}
		var m core.OutMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		ops, msgs = append(ops, op), append(msgs, m)
	}
	return ops, msgs
}

func TestEnabledNeedsSealerAndForm(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		sealing, form bool
		want          bool
	}{
		{name: "both", sealing: true, form: true, want: true},
		{name: "no sealer", form: true},
		{name: "no form", sealing: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := New(Config{Store: &store.Store{}, Outbox: &kicks{}, Sealing: tt.sealing})
			if err != nil {
				t.Fatal(err)
			}
			if tt.form {
				r.SetLink(func(string, string) string { return "" })
			}
			if r.Enabled() != tt.want {
				t.Fatalf("Enabled = %v", !tt.want)
			}
			if !tt.want && r.AskMissing(context.Background(), core.ApprovalRequest{}, "web:owner", []string{"TOKEN"}) {
				t.Fatal("asked for a secret while disabled")
			}
		})
	}
}

// An approved action's missing secret is asked for with one card per name
// in the action's conversation; the form's answer stores the sealed value
// and turns the card to "stored" in one transaction, once.
func TestAskMissingThenFulfilOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, true, true)
	ctx := context.Background()
	a := core.ApprovalRequest{ID: "appr-1", Channel: "web", Conversation: "web:c1"}
	if !b.r.AskMissing(ctx, a, "web:owner", []string{"API_TOKEN", "DB_PASSWORD"}) {
		t.Fatal("AskMissing did not ask")
	}
	ops, msgs := b.outbox(t)
	if len(msgs) != 2 || ops[0] != "send" || msgs[0].Card == nil || msgs[0].Conversation != "web:c1" {
		t.Fatalf("queued %v %+v", ops, msgs)
	}
	if b.kicks.n["web:c1"] != 2 {
		t.Fatalf("kicked %d", b.kicks.n["web:c1"])
	}
	// What the form hands over is already sealed (version byte 1, then
	// nonce and ciphertext); this package never sees the value.
	sealed := append([]byte{1}, []byte(strings.Repeat("s", 40))...)
	ref := string(msgs[0].Card.ID)
	req, err := b.r.GetSecretRequest(ctx, ref)
	if err != nil || req.Name != "API_TOKEN" || req.Requester != "web:owner" {
		t.Fatalf("request = %+v, %v", req, err)
	}
	token := b.tokens[ref]
	if token == "" {
		t.Fatal("the card's link carried no token")
	}

	if out, _, err := b.r.FulfillSecret(ctx, ref, secrets.HashToken("wrong"), sealed); err != nil || out != secrets.OutcomeWrongToken {
		t.Fatalf("wrong token: %v, %v", out, err)
	}
	out, got, err := b.r.FulfillSecret(ctx, ref, secrets.HashToken(token), sealed)
	if err != nil || out != secrets.OutcomeStored || got.Name != "API_TOKEN" {
		t.Fatalf("fulfil: %v %+v %v", out, got, err)
	}
	ops, msgs = b.outbox(t)
	if len(msgs) != 3 || ops[2] != "update" || string(msgs[2].Card.ID) != ref || msgs[2].Card.Status != cards.StatusDone {
		t.Fatalf("after fulfil: %v, last card %+v", ops, msgs[len(msgs)-1].Card)
	}
	if b.kicks.n["web:c1"] != 3 {
		t.Fatalf("kicked %d", b.kicks.n["web:c1"])
	}
	if out, _, _ := b.r.FulfillSecret(ctx, ref, secrets.HashToken(token), sealed); out != secrets.OutcomeAlreadyFulfilled {
		t.Fatalf("second use of the link: %v", out)
	}
	if _, msgs = b.outbox(t); len(msgs) != 3 {
		t.Fatalf("a used link queued %d more messages", len(msgs)-3)
	}
	var n int
	if err := b.st.Pool().QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE kind = $1`, audit.KindSecretStored).Scan(&n); err != nil || n != 1 {
		t.Fatalf("secret.stored entries = %d, %v", n, err)
	}
}

// Prepare labels the request and links the card; the caller stores both.
func TestPrepare(t *testing.T) {
	t.Parallel()
	b := setup(t, true, true)
	req, card, err := b.r.Prepare("GITHUB_TOKEN", strings.Repeat("l", 300), "web:owner", "web:c1", "web")
	if err != nil {
		t.Fatal(err)
	}
	if n := len([]rune(req.Label)); n > 100 {
		t.Fatalf("label of %d characters", n)
	}
	if string(card.ID) != req.Ref || b.tokens[req.Ref] == "" || !req.ExpiresAt.After(time.Now()) {
		t.Fatalf("request %+v, card %s", req, card.ID)
	}
	if _, _, err := b.r.Prepare("not a name!", "", "web:owner", "web:c1", "web"); err == nil {
		t.Fatal("a bad name was accepted")
	}
}
