package store

import (
	"context"
	"slices"
	"testing"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

// TranscriptAndSecretNames reads what Transcript and ListSecrets read, in
// one statement, as they are in the database at that moment: a secret
// another instance stores is named by the next call on this one.
func TestTranscriptAndSecretNames(t *testing.T) {
	t.Parallel()
	a, ctx, dsn := setupDSN(t, Options{})
	b := openStore(t, dsn, Options{})
	const conv core.ConversationID = "test:1"
	for _, text := range []string{"one", "two", "three"} {
		if err := a.Do(ctx, func(_ context.Context, tx *Tx) ([]audit.Entry, error) {
			return nil, tx.QueueMessage("test", core.OpSend, "r-"+text, core.OutMessage{Conversation: conv, Text: text})
		}); err != nil {
			t.Fatal(err)
		}
	}
	add := func(name string) {
		t.Helper()
		if _, err := b.Pool().Exec(ctx, `INSERT INTO secrets (name, ciphertext, created_at, updated_at) VALUES ($1, $2, now(), now())`,
			name, append([]byte{1}, make([]byte, 40)...)); err != nil {
			t.Fatal(err)
		}
	}
	check := func(n int) {
		t.Helper()
		want, err := a.Transcript(ctx, "test", conv, n)
		if err != nil {
			t.Fatal(err)
		}
		infos, err := a.ListSecrets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantNames := []string{}
		for _, i := range infos {
			wantNames = append(wantNames, i.Name)
		}
		got, names, err := a.TranscriptAndSecretNames(ctx, "test", conv, n)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(got, want, func(x, y core.TranscriptEntry) bool {
			return x.Text == y.Text && x.OutboxID == y.OutboxID && x.Version == y.Version && x.At.Equal(y.At)
		}) || len(got) != len(want) {
			t.Fatalf("n=%d: transcript %+v, want %+v", n, got, want)
		}
		if names == nil || !slices.Equal(names, wantNames) {
			t.Fatalf("n=%d: names %q, want %q (ListSecrets)", n, names, wantNames)
		}
	}
	check(10) // no secrets: an empty list, not nil
	add("db_password")
	check(10)
	add("api_token")
	add("b_c")
	add("bc")
	add("zeta")
	check(2)
	check(0)
}
