package store

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/secrets"
)

// This file's helpers are its own (prefixed secrets*) so it depends on the
// package's other tests only for TestMain.

// secretsDSN remembers each test store's DSN, to open more stores on it.
var secretsDSN sync.Map

type secretsClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *secretsClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *secretsClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func secretsOpen(t *testing.T, dsn string, clock *secretsClock) *Store {
	t.Helper()
	s, err := Open(context.Background(), dsn, Options{Logger: slog.New(slog.DiscardHandler), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func secretsSetup(t *testing.T) (*Store, *secretsClock, *secrets.Sealer) {
	t.Helper()
	clock := &secretsClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	dsn := migratedDatabase(t)
	s := secretsOpen(t, dsn, clock)
	secretsDSN.Store(s, dsn)
	k, err := secrets.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	sealer, err := secrets.NewSealer(k)
	if err != nil {
		t.Fatal(err)
	}
	return s, clock, sealer
}

func secretsRequest(t *testing.T, s *Store, now time.Time, name string, ttl time.Duration) (secrets.Request, string) {
	t.Helper()
	r, tok, err := secrets.NewRequest(secrets.Request{Name: name, Label: "Label of " + name, Hint: "hint", Requester: "webchat:local",
		Conversation: "webchat:local", Channel: "webchat"}, now, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Do(t.Context(), func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		return tx.InsertSecretRequest(ctx, r)
	}); err != nil {
		t.Fatal(err)
	}
	return r, tok
}

func secretsAudit(t *testing.T, s *Store, kind string) []string {
	t.Helper()
	rows, err := s.Pool().Query(t.Context(), `SELECT data::text FROM audit_log WHERE kind = $1 ORDER BY seq`, kind)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

func TestSecretRequestLifecycle(t *testing.T) {
	t.Parallel()
	s, clock, sealer := secretsSetup(t)
	ctx := t.Context()
	value := []byte("xoxb-canary-" + core.NewID())

	r, tok := secretsRequest(t, s, clock.Now(), "slack_token", 10*time.Minute)
	got, err := s.GetSecretRequest(ctx, r.Ref)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "slack_token" || got.Label != "Label of slack_token" || got.Status != secrets.StatusPending ||
		!got.ExpiresAt.Equal(r.ExpiresAt) || !secrets.TokenMatches(got.TokenHash, tok) {
		t.Fatalf("%+v", got)
	}
	if _, err := s.GetSecretRequest(ctx, "nope"); err != core.ErrNotFound {
		t.Fatalf("unknown ref: %v", err)
	}

	ct, err := sealer.Seal(r.Name, value)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		ref  string
		tok  string
		want secrets.Outcome
	}{
		{"unknown ref", "nope", tok, secrets.OutcomeNotFound},
		{"wrong token", r.Ref, tok + "x", secrets.OutcomeWrongToken},
		{"right token", r.Ref, tok, secrets.OutcomeStored},
		{"reused link", r.Ref, tok, secrets.OutcomeAlreadyFulfilled},
		{"wrong token after use", r.Ref, "other", secrets.OutcomeWrongToken},
	}
	for _, st := range steps {
		out, req, err := s.FulfillSecret(ctx, st.ref, secrets.HashToken(st.tok), ct)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if out != st.want {
			t.Fatalf("%s: %v, want %v", st.name, out, st.want)
		}
		if (out == secrets.OutcomeWrongToken || out == secrets.OutcomeNotFound) && req.Ref != "" {
			t.Fatalf("%s: request revealed without the token", st.name)
		}
		if out == secrets.OutcomeStored && (req.Name != r.Name || req.Conversation != r.Conversation || req.Status != secrets.StatusFulfilled) {
			t.Fatalf("%s: %+v", st.name, req)
		}
	}

	stored, err := s.SecretCiphertext(ctx, "slack_token")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := sealer.Open("slack_token", stored); err != nil || !bytes.Equal(v, value) {
		t.Fatal("stored ciphertext does not open to the value", err)
	}
	list, err := s.ListSecrets(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "slack_token" || !list[0].LastUsedAt.Equal(clock.Now()) || !list[0].CreatedAt.Equal(clock.Now()) {
		t.Fatalf("%+v %v", list, err)
	}
	if _, err := s.SecretCiphertext(ctx, "missing"); err != core.ErrNotFound {
		t.Fatal(err)
	}

	// Audit: names and refs only; exactly one stored entry.
	if a := secretsAudit(t, s, "secret.requested"); len(a) != 1 || !strings.Contains(a[0], `"slack_token"`) {
		t.Fatalf("requested: %v", a)
	}
	a := secretsAudit(t, s, "secret.stored")
	if len(a) != 1 || !strings.Contains(a[0], `"slack_token"`) || !strings.Contains(a[0], `"rotated": false`) {
		t.Fatalf("stored: %v", a)
	}
	var dump string
	if err := s.Pool().QueryRow(ctx, `SELECT string_agg(t::text, '\n') FROM audit_log t`).Scan(&dump); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(dump, string(value)) || strings.Contains(dump, tok) {
		t.Fatal("audit log contains the value or the token")
	}

	// Delete.
	clock.Add(time.Minute)
	if ok, err := s.DeleteSecret(ctx, "slack_token", "webchat:local", "webchat:local"); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if ok, err := s.DeleteSecret(ctx, "slack_token", "webchat:local", "webchat:local"); err != nil || ok {
		t.Fatal("second delete", ok, err)
	}
	if a := secretsAudit(t, s, "secret.deleted"); len(a) != 1 {
		t.Fatalf("deleted: %v", a)
	}
	if _, err := s.SecretCiphertext(ctx, "slack_token"); err != core.ErrNotFound {
		t.Fatal(err)
	}
}

func TestSecretRotation(t *testing.T) {
	t.Parallel()
	s, clock, sealer := secretsSetup(t)
	ctx := t.Context()
	created := clock.Now()
	for i, v := range []string{"first-value-1", "second-value-2"} {
		r, tok := secretsRequest(t, s, clock.Now(), "api_key", time.Hour)
		ct, _ := sealer.Seal("api_key", []byte(v))
		out, _, err := s.FulfillSecret(ctx, r.Ref, secrets.HashToken(tok), ct)
		if err != nil || out != secrets.OutcomeStored {
			t.Fatalf("%d: %v %v", i, out, err)
		}
		clock.Add(time.Minute)
	}
	ct, err := s.SecretCiphertext(ctx, "api_key")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := sealer.Open("api_key", ct); err != nil || string(v) != "second-value-2" {
		t.Fatalf("after rotation: %v", err)
	}
	list, _ := s.ListSecrets(ctx)
	if len(list) != 1 || !list[0].CreatedAt.Equal(created) || !list[0].UpdatedAt.Equal(created.Add(time.Minute)) {
		t.Fatalf("%+v", list)
	}
	a := secretsAudit(t, s, "secret.stored")
	if len(a) != 2 || !strings.Contains(a[1], `"rotated": true`) {
		t.Fatalf("%v", a)
	}
}

func TestSecretRequestExpiry(t *testing.T) {
	t.Parallel()
	s, clock, sealer := secretsSetup(t)
	ctx := t.Context()
	r, tok := secretsRequest(t, s, clock.Now(), "bot_token", time.Minute)
	keep, _ := secretsRequest(t, s, clock.Now(), "other", time.Hour)
	clock.Add(time.Minute) // expires_at is exclusive
	ct, _ := sealer.Seal("bot_token", []byte("v"))
	out, req, err := s.FulfillSecret(ctx, r.Ref, secrets.HashToken(tok), ct)
	if err != nil || out != secrets.OutcomeExpired || req.Ref != r.Ref {
		t.Fatalf("%v %v", out, err)
	}
	if list, _ := s.ListSecrets(ctx); len(list) != 0 {
		t.Fatal("expired request stored a secret")
	}
	var expired []secrets.Request
	if err := s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		var entries []audit.Entry
		var err error
		expired, entries, err = tx.ExpireSecretRequests(ctx, 100)
		return entries, err
	}); err != nil {
		t.Fatal(err)
	}
	if len(expired) != 1 || expired[0].Ref != r.Ref || expired[0].Status != secrets.StatusExpired {
		t.Fatalf("%+v", expired)
	}
	if got, _ := s.GetSecretRequest(ctx, keep.Ref); got.Status != secrets.StatusPending {
		t.Fatal("unexpired request touched")
	}
	if a := secretsAudit(t, s, "secret.expired"); len(a) != 1 {
		t.Fatalf("%v", a)
	}
	// Still expired (not pending) when tried again.
	if out, _, _ := s.FulfillSecret(ctx, r.Ref, secrets.HashToken(tok), ct); out != secrets.OutcomeExpired {
		t.Fatal(out)
	}
}

// Many concurrent submissions of one link (separate writers, as separate
// processes): exactly one stores.
func TestSecretFulfilRace(t *testing.T) {
	t.Parallel()
	s, clock, sealer := secretsSetup(t)
	ctx := t.Context()
	r, tok := secretsRequest(t, s, clock.Now(), "race", time.Hour)
	dsn, _ := secretsDSN.Load(s)
	dsnStores := []*Store{s, secretsOpen(t, dsn.(string), clock), secretsOpen(t, dsn.(string), clock), secretsOpen(t, dsn.(string), clock)}
	var stored, used atomic.Int32
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ct, _ := sealer.Seal("race", []byte{byte('a' + i)})
			out, _, err := dsnStores[i%len(dsnStores)].FulfillSecret(ctx, r.Ref, secrets.HashToken(tok), ct)
			if err != nil {
				t.Error(err)
				return
			}
			switch out {
			case secrets.OutcomeStored:
				stored.Add(1)
			case secrets.OutcomeAlreadyFulfilled:
				used.Add(1)
			default:
				t.Errorf("outcome %v", out)
			}
		}()
	}
	wg.Wait()
	if stored.Load() != 1 || used.Load() != 15 {
		t.Fatalf("stored %d, already used %d", stored.Load(), used.Load())
	}
	if a := secretsAudit(t, s, "secret.stored"); len(a) != 1 {
		t.Fatalf("%d stored entries", len(a))
	}
}

// The schema refuses what is not sealed and has no place for plaintext.
func TestSecretsSchema(t *testing.T) {
	t.Parallel()
	s, _, _ := secretsSetup(t)
	ctx := t.Context()
	for _, ct := range [][]byte{[]byte("plaintext password that is long enough"), {1, 2, 3}, nil} {
		_, err := s.Pool().Exec(ctx, `INSERT INTO secrets (name, ciphertext, created_at, updated_at) VALUES ('x', $1, now(), now())`, ct)
		if err == nil {
			t.Fatalf("stored unsealed bytes %q", ct)
		}
	}
	for _, bad := range []string{"bad name", "", "1x"} {
		if _, err := s.Pool().Exec(ctx, `INSERT INTO secrets (name, ciphertext, created_at, updated_at) VALUES ($1, $2, now(), now())`,
			bad, append([]byte{1}, make([]byte, 40)...)); err == nil {
			t.Fatalf("stored name %q", bad)
		}
	}
	var cols string
	if err := s.Pool().QueryRow(ctx, `SELECT string_agg(table_name || '.' || column_name, ' ' ORDER BY table_name, ordinal_position)
		FROM information_schema.columns WHERE table_schema = current_schema() AND table_name IN ('secrets', 'secret_requests')`).Scan(&cols); err != nil {
		t.Fatal(err)
	}
	want := "secret_requests.ref secret_requests.name secret_requests.label secret_requests.hint secret_requests.requester " +
		"secret_requests.conversation secret_requests.channel secret_requests.token_hash secret_requests.status secret_requests.created_at " +
		"secret_requests.expires_at secret_requests.fulfilled_at secrets.name secrets.ciphertext secrets.created_at secrets.updated_at secrets.last_used_at"
	if cols != want {
		t.Fatalf("columns changed (no plaintext column may exist):\n%s", cols)
	}
	// A request must carry a 32-byte token hash.
	if err := s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		return tx.InsertSecretRequest(ctx, secrets.Request{Ref: "r", Name: "n", Label: "n", TokenHash: []byte("short"), ExpiresAt: tx.Now().Add(time.Hour)})
	}); err == nil {
		t.Fatal("short token hash accepted")
	}
	if err := s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		return tx.InsertSecretRequest(ctx, secrets.Request{Ref: "r", Name: "n", Label: "n", TokenHash: make([]byte, 32)})
	}); err == nil {
		t.Fatal("request without expiry accepted")
	}
}
