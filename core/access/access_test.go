package access

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/trust"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// out is a fake of the turn's outcome.
type out struct {
	replies []string
	notes   []audit.Kind
	updates []*cards.Card
	sends   []core.OutMessage
	after   []func()
}

func (o *out) Reply(format string, a ...any) {
	o.replies = append(o.replies, fmt.Sprintf(format, a...))
}
func (o *out) Note(kind audit.Kind, _ map[string]any) { o.notes = append(o.notes, kind) }
func (o *out) Update(c *cards.Card)                   { o.updates = append(o.updates, c) }
func (o *out) After(f func())                         { o.after = append(o.after, f) }
func (o *out) SendTo(_ core.ConversationID, _ string, m core.OutMessage) {
	o.sends = append(o.sends, m)
}

type book struct {
	mu          sync.Mutex
	invalidated int
}

func (b *book) OwnersBound(context.Context) []core.IdentityID { return nil }
func (b *book) Invalidate()                                   { b.mu.Lock(); b.invalidated++; b.mu.Unlock() }

type kicks struct {
	mu sync.Mutex
	n  map[core.ConversationID]int
}

func (k *kicks) Kick(c core.ConversationID, n int) { k.mu.Lock(); k.n[c] += n; k.mu.Unlock() }

// channel is a running channel that can open a direct conversation with
// anyone on it ("<channel>:dm-<user>").
type channel struct{ name core.ChannelName }

func (c channel) Name() core.ChannelName                                         { return c.name }
func (c channel) Run(ctx context.Context, _ core.Inbox) error                    { <-ctx.Done(); return nil }
func (c channel) Send(context.Context, core.OutMessage) (core.MessageRef, error) { return "", nil }
func (c channel) Update(context.Context, core.MessageRef, core.OutMessage) error { return nil }
func (c channel) DirectConversation(id core.IdentityID) (core.ConversationID, bool) {
	return core.ConversationID(string(c.name) + ":dm-" + strings.TrimPrefix(string(id), string(c.name)+":")), true
}

const owner = core.IdentityID("test:owner")

func newAccess(t *testing.T, st Store, policies map[core.ChannelName]trust.AccessPolicy) (*Access, *book, *kicks) {
	t.Helper()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	b, k := &book{}, &kicks{n: map[core.ConversationID]int{}}
	if st == nil {
		st = &store.Store{}
	}
	a, err := New(Config{Policies: policies, Owners: []core.IdentityID{owner}, Book: b, Key: key, Store: st, Outbox: k,
		Channels: map[core.ChannelName]core.Channel{"test": channel{"test"}, "wa": channel{"wa"}}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return a, b, k
}

func TestGate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy trust.AccessPolicy
		trust  core.Trust
		group  bool
		text   string
		tap    bool
		want   Verdict
		noted  bool
	}{
		{name: "open answers a stranger", policy: trust.AccessOpen, trust: core.TrustExternal, want: Answer},
		{name: "disabled ignores even the trusted", policy: trust.AccessDisabled, trust: core.TrustAuth, want: Ignore, noted: true},
		{name: "disabled answers an owner", policy: trust.AccessDisabled, trust: core.TrustOwner, want: Answer},
		{name: "disabled answers in a group", policy: trust.AccessDisabled, trust: core.TrustExternal, group: true, want: Answer},
		{name: "allowlist ignores a stranger", policy: trust.AccessAllowlist, trust: core.TrustExternal, want: Ignore, noted: true},
		{name: "allowlist answers the allowed", policy: trust.AccessAllowlist, trust: core.TrustAuth, want: Answer},
		{name: "pairing asks for a stranger", policy: trust.AccessPairing, trust: core.TrustExternal, text: "hello", want: Ask},
		{name: "pairing lets /pair through", policy: trust.AccessPairing, trust: core.TrustExternal, text: "/pair ABC", want: Answer},
		{name: "pairing does not ask on a tap", policy: trust.AccessPairing, trust: core.TrustExternal, tap: true, want: Answer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, _, _ := newAccess(t, nil, map[core.ChannelName]trust.AccessPolicy{"test": tt.policy})
			turn := core.Turn{Channel: "test", Conversation: "test:c", Sender: "test:x", Text: tt.text, ChatKind: core.ChatDirect}
			if tt.group {
				turn.ChatKind = core.ChatGroup
			}
			if tt.tap {
				turn.Tap = &core.Tap{Card: "c", Choice: "approve"}
			}
			o := &out{}
			if got := a.Gate(core.StoredTurn{Seq: 1, Turn: turn}, tt.trust, o); got != tt.want {
				t.Fatalf("Gate = %v, want %v", got, tt.want)
			}
			if (len(o.notes) == 1 && o.notes[0] == audit.KindAccessIgnored) != tt.noted {
				t.Fatalf("notes = %v", o.notes)
			}
		})
	}
}

func TestUnknownPolicyIsRefused(t *testing.T) {
	t.Parallel()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	if _, err := New(Config{Policies: map[core.ChannelName]trust.AccessPolicy{"test": "sometimes"}, Book: &book{}, Key: key,
		Store: &store.Store{}, Outbox: &kicks{}}); err == nil {
		t.Fatal("an unknown policy was accepted")
	}
}

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), storetest.NewDatabase(t), store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// A stranger's request goes to the owner as a card; a second message
// repeats its code; only an owner's Allow, in the owner's chat, binds the
// stranger (signed), tells them, and refreshes the trust book after commit.
func TestRequestThenDecide(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	a, b, _ := newAccess(t, st, map[core.ChannelName]trust.AccessPolicy{"test": trust.AccessPairing})
	ctx := context.Background()
	stranger := core.StoredTurn{Seq: 1, Turn: core.Turn{Channel: "test", Conversation: "test:s", Sender: "test:stranger", SenderName: "Mallory", Text: "hi"}}
	run := func(f func(ctx context.Context, tx *store.Tx, o *out) error) *out {
		t.Helper()
		var o *out
		if err := st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			o = &out{}
			return nil, f(ctx, tx, o)
		}); err != nil {
			t.Fatal(err)
		}
		return o
	}
	o := run(func(ctx context.Context, tx *store.Tx, o *out) error { return a.Request(ctx, tx, stranger, o) })
	if len(o.sends) != 1 || o.sends[0].Conversation != "test:dm-owner" || o.sends[0].Card == nil {
		t.Fatalf("sends = %+v", o.sends)
	}
	card := o.sends[0].Card
	o = run(func(ctx context.Context, tx *store.Tx, o *out) error { return a.Request(ctx, tx, stranger, o) })
	if len(o.sends) != 0 || len(o.replies) != 1 {
		t.Fatalf("second request: %q, %d sends", o.replies, len(o.sends))
	}

	req := core.AccessRequest{ID: string(card.ID)}
	tap := func(from core.IdentityID, conv core.ConversationID, tr core.Trust, choice string) (Decision, *out) {
		t.Helper()
		var d Decision
		o := run(func(ctx context.Context, tx *store.Tx, o *out) error {
			r, err := tx.GetAccessRequest(ctx, req.ID)
			if err != nil {
				return err
			}
			d, err = a.Decide(ctx, tx, core.StoredTurn{Turn: core.Turn{Channel: "test", Conversation: conv, Sender: from}}, tr, r,
				core.Tap{Card: card.ID, Choice: choice}, o)
			return err
		})
		return d, o
	}
	if d, _ := tap("test:stranger", "test:s", core.TrustExternal, "allow"); d.Refused != "unknown_card" {
		t.Fatalf("a tap from another chat: %+v", d)
	}
	if d, _ := tap("test:friend", "test:dm-owner", core.TrustAuth, "allow"); d.Refused != "not_approver" {
		t.Fatalf("a tap from a non-owner: %+v", d)
	}
	d, o := tap(owner, "test:dm-owner", core.TrustOwner, "allow")
	if d.Refused != "" || d.Toast != "Allowed." || len(o.sends) != 1 || o.sends[0].Conversation != "test:s" {
		t.Fatalf("allow: %+v, sends %+v", d, o.sends)
	}
	if b.invalidated != 0 {
		t.Fatal("the trust book was refreshed before commit")
	}
	for _, f := range o.after {
		f()
	}
	if b.invalidated != 1 {
		t.Fatal("the trust book was not refreshed after commit")
	}
	if d, o := tap(owner, "test:dm-owner", core.TrustOwner, "deny"); d.Refused != "already_decided" || len(o.updates) != 1 {
		t.Fatalf("a second decision: %+v", d)
	}
	var n int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM identity_bindings WHERE identity = 'test:stranger' AND role = 'auth'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("bindings = %d, %v", n, err)
	}
}

// NotifyOwners reaches an owner's newest direct conversation on every
// other running channel; nothing when there is none.
func TestNotifyOwners(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	a, _, k := newAccess(t, st, nil)
	ctx := context.Background()
	if n, err := a.NotifyOwners(ctx, "wa", "nobody yet"); err != nil || n != 0 {
		t.Fatalf("with no conversation: %d, %v", n, err)
	}
	for i, turn := range []core.Turn{
		{Channel: "test", Conversation: "test:dm", Sender: owner, ChatKind: core.ChatDirect},
		{Channel: "test", Conversation: "test:group", Sender: owner, ChatKind: core.ChatGroup},
		{Channel: "wa", Conversation: "wa:dm", Sender: owner, ChatKind: core.ChatDirect},
	} {
		turn.EventID, turn.Text, turn.Evidence = fmt.Sprint("e", i), "hi", core.Evidence{Authenticated: true, Method: "test"}
		if err := st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			_, _, err := tx.InsertTurn(ctx, turn)
			return nil, err
		}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := a.NotifyOwners(ctx, "wa", "WhatsApp: logged out.")
	if err != nil || n != 1 || k.n["test:dm"] != 1 || len(k.n) != 1 {
		t.Fatalf("NotifyOwners: %d, %v; kicks %v", n, err, k.n)
	}
}
