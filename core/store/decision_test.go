package store

import (
	"bytes"
	"context"
	"testing"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

func TestApprovalSignatureRoundTrip(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	a := testApproval("signed", s.now())
	a.Signature = bytes.Repeat([]byte{7}, 64)
	mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) { tx.QueueApproval(a); return nil, nil })
	insertApproval(t, ctx, s, "unsigned", false)
	for _, tt := range []struct {
		name string
		id   core.ApprovalID
		want []byte
	}{
		{"signed", "signed", a.Signature},
		{"unsigned", "unsigned", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.GetApproval(ctx, tt.id)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Signature, tt.want) || (tt.want == nil) != (got.Signature == nil) {
				t.Fatalf("signature = %x, want %x", got.Signature, tt.want)
			}
		})
	}
}

// TestRecordedDecision: the nonce row and the "token.consumed" entry are
// found only for the approval and token they name, with the hashes of the
// neighbouring entries.
func TestRecordedDecision(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	insertApproval(t, ctx, s, "ap1", false)
	insertApproval(t, ctx, s, "ap2", false)
	mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		if _, err := tx.ConsumeNonce(ctx, []byte("nonce-1"), "tok1", "ap1"); err != nil {
			return nil, err
		}
		return []audit.Entry{{Kind: "token.consumed", Actor: "webchat:local", Conversation: "webchat:local",
			Data: map[string]any{"approval": "ap1", "token_id": "tok1"}}}, nil
	})
	// A nonce consumed for ap2 without its audit entry, and an entry of
	// another kind naming ap2's token.
	mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		if _, err := tx.ConsumeNonce(ctx, []byte("nonce-2"), "tok2", "ap2"); err != nil {
			return nil, err
		}
		return []audit.Entry{{Kind: "token.minted", Actor: "webchat:local", Conversation: "webchat:local",
			Data: map[string]any{"approval": "ap2", "token_id": "tok2"}}}, nil
	})
	mustDo(t, ctx, s, entriesOp(audit.Entry{Kind: "execution.started", Actor: "silas", Conversation: "webchat:local",
		Data: map[string]any{"approval": "ap1"}}))

	get := func(id core.ApprovalID, nonce, tok string) core.Decision {
		t.Helper()
		var d core.Decision
		mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			var err error
			d, err = tx.RecordedDecision(ctx, id, []byte(nonce), tok)
			return nil, err
		})
		return d
	}
	tests := []struct {
		name                     string
		id                       core.ApprovalID
		nonce, tok               string
		wantNonceFor             core.ApprovalID // "" = no nonce row
		wantEntry, wantNextEntry bool
		wantStarted              bool
	}{
		{"recorded, started", "ap1", "nonce-1", "tok1", "ap1", true, true, true},
		{"nonce only", "ap2", "nonce-2", "tok2", "ap2", false, false, false},
		{"entry names another approval", "ap2", "nonce-1", "tok1", "ap1", false, false, false},
		{"nothing", "ap1", "nonce-9", "tok9", "", false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := get(tt.id, tt.nonce, tt.tok)
			if (d.NonceApproval != nil) != (tt.wantNonceFor != "") || (d.NonceApproval != nil && *d.NonceApproval != tt.wantNonceFor) {
				t.Fatalf("nonce approval = %v, want %q", d.NonceApproval, tt.wantNonceFor)
			}
			if d.NonceApproval != nil && (d.NonceTokenID == nil || *d.NonceTokenID != tt.tok) {
				t.Fatalf("nonce token id = %v, want %s", d.NonceTokenID, tt.tok)
			}
			if d.Started != tt.wantStarted {
				t.Fatalf("started = %v, want %v", d.Started, tt.wantStarted)
			}
			if (d.Entry != nil) != tt.wantEntry {
				t.Fatalf("entry = %+v, want found %v", d.Entry, tt.wantEntry)
			}
			if d.Entry == nil {
				return
			}
			if d.Entry.Entry.Kind != "token.consumed" || d.Entry.Entry.Data["token_id"] != tt.tok || d.Entry.Entry.Conversation != "webchat:local" {
				t.Fatalf("entry = %+v", d.Entry)
			}
			c, err := audit.Canonical(d.Entry.Seq, d.Entry.At, d.Entry.Entry.Kind, d.Entry.Entry.Actor, d.Entry.Entry.Conversation, d.Entry.DataJSON)
			if err != nil || !bytes.Equal(audit.Chain(d.Entry.PrevHash, c), d.Entry.Hash) {
				t.Fatalf("entry does not rehash: %v", err)
			}
			if !bytes.Equal(d.PrevHash, d.Entry.PrevHash) {
				t.Fatalf("prev hash %x, entry's prev_hash %x", d.PrevHash, d.Entry.PrevHash)
			}
			if tt.wantNextEntry && !bytes.Equal(d.NextPrevHash, d.Entry.Hash) {
				t.Fatalf("next entry's prev_hash %x, entry's hash %x", d.NextPrevHash, d.Entry.Hash)
			}
		})
	}
}
