package previewlink_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/decide"
	"github.com/silas-gateway/silas/core/previewlink"
)

type rows map[core.ApprovalID]core.ApprovalRequest

func (r rows) GetApproval(_ context.Context, id core.ApprovalID) (core.ApprovalRequest, error) {
	a, ok := r[id]
	if !ok {
		return a, core.ErrNotFound
	}
	return a, nil
}

// The page shows a request's whole preview to the holder of its link's
// token, only while the stored request still verifies: a preview changed
// in the database after the card is not shown, as a tap on the card is
// refused.
func TestPreview(t *testing.T) {
	t.Parallel()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Now()
	a := core.ApprovalRequest{ID: "req-1", Channel: "test", Conversation: "test:chat", Requester: "test:alice", ActionCanonical: []byte(`{}`),
		Intent: "write the config", Risk: cards.RiskMedium, CreatedAt: now, ExpiresAt: now.Add(time.Minute),
		Preview: strings.Repeat("+line\n", 600)}
	a.ActionHash = hashOf(a.ActionCanonical)
	if err := decide.SignRequest(key, &a); err != nil {
		t.Fatal(err)
	}
	altered := a
	altered.ID, altered.Preview = "req-2", "+harmless"
	if err := decide.SignRequest(key, &altered); err != nil {
		t.Fatal(err)
	}
	altered.Preview = strings.Repeat("+other\n", 600) // edited after signing
	st := rows{a.ID: a, altered.ID: altered}
	p := previewlink.Pages{Store: st, Key: key}
	ctx := context.Background()
	tests := []struct {
		name  string
		id    string
		token string
		want  error
	}{
		{"its token", "req-1", previewlink.Token(key, "req-1"), nil},
		{"another request's token", "req-1", previewlink.Token(key, "req-2"), previewlink.ErrNotFound},
		{"another gateway's token", "req-1", previewlink.Token(other, "req-1"), previewlink.ErrNotFound},
		{"no token", "req-1", "", previewlink.ErrNotFound},
		{"no such request", "req-9", previewlink.Token(key, "req-9"), previewlink.ErrNotFound},
		{"altered after the card", "req-2", previewlink.Token(key, "req-2"), previewlink.ErrAltered},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, err := p.Preview(ctx, tt.id, tt.token)
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("err = %v; want %v", err, tt.want)
			}
			if tt.want == nil && (doc.Preview != a.Preview || doc.Intent != a.Intent) {
				t.Fatalf("doc = %+v", doc)
			}
			if tt.want != nil && doc.Preview != "" {
				t.Fatalf("a refused page returned a preview: %q", doc.Preview)
			}
		})
	}
}

func hashOf(b []byte) []byte { s := sha256.Sum256(b); return s[:] }
