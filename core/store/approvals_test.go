package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

func TestConsumeNonce(t *testing.T) {
	t.Parallel()
	s, ctx, dsn := setupDSN(t, Options{})
	insertApproval(t, ctx, s, "ap1", false)
	consume := func(st *Store, nonce, tokenID, id string) (bool, error) {
		var ok bool
		err := st.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			var err error
			ok, err = tx.ConsumeNonce(ctx, []byte(nonce), tokenID, core.ApprovalID(id))
			return nil, err
		})
		return ok, err
	}

	steps := []struct {
		name, nonce, tokenID, approval string
		want                           bool
		wantErr                        bool
	}{
		{"first use", "n1", "tok1", "ap1", true, false},
		{"replay", "n1", "tok1", "ap1", false, false},
		{"replay under another token id", "n1", "tok2", "ap1", false, false},
		{"new nonce, reused token id", "n2", "tok1", "ap1", false, false},
		{"unknown approval (foreign key)", "n3", "tok3", "nope", false, true},
	}
	for _, st := range steps {
		ok, err := consume(s, st.nonce, st.tokenID, st.approval)
		if ok != st.want || (err != nil) != st.wantErr {
			t.Errorf("%s: ConsumeNonce = %v, %v; want %v, error %v", st.name, ok, err, st.want, st.wantErr)
		}
	}

	for _, nstores := range []int{1, 2} {
		t.Run(fmt.Sprintf("concurrent, %d stores", nstores), func(t *testing.T) {
			sts := stores(t, s, dsn, nstores)
			nonce := fmt.Sprintf("race-%d", nstores)
			var wins atomic.Int32
			race(20, func(i int) {
				ok, err := consume(sts[i%nstores], nonce, nonce, "ap1")
				if err != nil {
					t.Errorf("goroutine %d: %v", i, err)
				}
				if ok {
					wins.Add(1)
				}
			})
			if wins.Load() != 1 {
				t.Fatalf("%d goroutines consumed the same nonce, want exactly 1", wins.Load())
			}
			if n := queryInt(t, ctx, s, `SELECT count(*) FROM token_nonces WHERE nonce = $1`, []byte(nonce)); n != 1 {
				t.Fatalf("%d rows for the nonce", n)
			}
		})
	}
}

func TestTransitionApprovalSequence(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	insertApproval(t, ctx, s, "ap1", false)
	pending, open := []core.ApprovalStatus{core.ApprovalPending}, []core.ApprovalStatus{core.ApprovalPending, core.ApprovalConfirming}
	steps := []struct {
		name       string
		id         string
		from       []core.ApprovalStatus
		to         core.ApprovalStatus
		by         core.IdentityID
		token      []byte
		want       bool
		wantStatus core.ApprovalStatus
	}{
		{"pending → confirming", "ap1", pending, core.ApprovalConfirming, "webchat:a", nil, true, core.ApprovalConfirming},
		{"not in from", "ap1", pending, core.ApprovalApproved, "webchat:a", []byte("t1"), false, core.ApprovalConfirming},
		{"confirming → approved", "ap1", open, core.ApprovalApproved, "webchat:b", []byte("t2"), true, core.ApprovalApproved},
		{"already decided", "ap1", open, core.ApprovalDeclined, "webchat:c", nil, false, core.ApprovalApproved},
		{"unknown id", "nope", open, core.ApprovalApproved, "webchat:c", nil, false, ""},
	}
	for _, st := range steps {
		var ok bool
		mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			var err error
			ok, err = tx.TransitionApproval(ctx, core.ApprovalID(st.id), st.from, st.to, st.by, st.token)
			return nil, err
		})
		if ok != st.want {
			t.Errorf("%s: ok = %v, want %v", st.name, ok, st.want)
		}
		if st.wantStatus == "" {
			continue
		}
		a, err := s.GetApproval(ctx, core.ApprovalID(st.id))
		if err != nil {
			t.Fatal(err)
		}
		if a.Status != st.wantStatus {
			t.Errorf("%s: status %s, want %s", st.name, a.Status, st.wantStatus)
		}
	}
	a, err := s.GetApproval(ctx, "ap1")
	if err != nil {
		t.Fatal(err)
	}
	if a.DecidedBy != "webchat:b" || string(a.Token) != "t2" || a.DecidedAt.IsZero() {
		t.Errorf("decided approval: by %q token %q at %v; want webchat:b, t2, set", a.DecidedBy, a.Token, a.DecidedAt)
	}
	if _, err := s.GetApproval(ctx, "nope"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("GetApproval(unknown) = %v, want core.ErrNotFound", err)
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

func TestRequestedCommand(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	req := func(id, cmd string) audit.Entry {
		return audit.Entry{Kind: audit.KindApprovalRequested, Actor: "webchat:local", Conversation: "webchat:local",
			Data: map[string]any{"approval": id, "command": cmd, "risk": "low"}}
	}
	mustDo(t, ctx, s, entriesOp(req("a1", "echo first"), req("a2", "echo other")))
	// A later entry for the same approval (anyone who can append can write
	// one) does not replace what was recorded at the request.
	mustDo(t, ctx, s, entriesOp(req("a1", "echo appended later")))
	for _, c := range []struct {
		id, want string
		err      error
	}{
		{"a1", "echo first", nil},
		{"a2", "echo other", nil},
		{"a3", "", core.ErrNotFound},
	} {
		got, err := s.RequestedCommand(ctx, core.ApprovalID(c.id))
		if got != c.want || !errors.Is(err, c.err) {
			t.Errorf("RequestedCommand(%s) = %q, %v; want %q, %v", c.id, got, err, c.want, c.err)
		}
	}
}

func TestTransitionCAS(t *testing.T) {
	t.Parallel()
	const contenders = 20
	for _, nstores := range []int{1, 2} {
		t.Run(fmt.Sprintf("approval, %d stores", nstores), func(t *testing.T) {
			s, ctx, dsn := setupDSN(t, Options{})
			sts := stores(t, s, dsn, nstores)
			insertApproval(t, ctx, s, "ap1", false)
			var mu sync.Mutex
			var winners []int
			race(contenders, func(i int) {
				to, token := core.ApprovalApproved, []byte(fmt.Sprintf("token%d", i))
				if i%2 == 1 {
					to, token = core.ApprovalDeclined, nil
				}
				var ok bool
				err := sts[i%nstores].Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
					var err error
					ok, err = tx.TransitionApproval(ctx, "ap1", []core.ApprovalStatus{core.ApprovalPending}, to, core.IdentityID(fmt.Sprintf("webchat:u%d", i)), token)
					return nil, err
				})
				if err != nil {
					t.Errorf("contender %d: %v", i, err)
				}
				if ok {
					mu.Lock()
					winners = append(winners, i)
					mu.Unlock()
				}
			})
			if len(winners) != 1 {
				t.Fatalf("winners %v, want exactly one", winners)
			}
			w := winners[0]
			a, err := s.GetApproval(ctx, "ap1")
			if err != nil {
				t.Fatal(err)
			}
			wantStatus, wantToken := core.ApprovalApproved, fmt.Sprintf("token%d", w)
			if w%2 == 1 {
				wantStatus, wantToken = core.ApprovalDeclined, ""
			}
			if a.Status != wantStatus || a.DecidedBy != core.IdentityID(fmt.Sprintf("webchat:u%d", w)) || string(a.Token) != wantToken {
				t.Fatalf("approval after the race: %s by %s token %q; winner %d wanted %s token %q", a.Status, a.DecidedBy, a.Token, w, wantStatus, wantToken)
			}
		})

		t.Run(fmt.Sprintf("execution, %d stores", nstores), func(t *testing.T) {
			s, ctx, dsn := setupDSN(t, Options{})
			sts := stores(t, s, dsn, nstores)
			insertApproval(t, ctx, s, "ap1", true)
			var wins atomic.Int32
			race(contenders, func(i int) {
				var ok bool
				err := sts[i%nstores].Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
					var err error
					ok, err = tx.TransitionExecution(ctx, "ap1", core.ExecQueued, core.ExecRunning, core.ExecUpdate{Started: true})
					return nil, err
				})
				if err != nil {
					t.Errorf("contender %d: %v", i, err)
				}
				if ok {
					wins.Add(1)
				}
			})
			if wins.Load() != 1 {
				t.Fatalf("%d contenders moved queued → running, want exactly 1", wins.Load())
			}

			// The rest of the life cycle, each step once.
			rec := &core.ExecRecord{ExitCode: 0, Stdout: "ok\n", Isolation: "test"}
			steps := []struct {
				from, to core.ExecStatus
				u        core.ExecUpdate
				want     bool
			}{
				{core.ExecQueued, core.ExecRunning, core.ExecUpdate{Started: true}, false},
				{core.ExecRunning, core.ExecExecuted, core.ExecUpdate{Result: rec}, true},
				{core.ExecRunning, core.ExecExecuted, core.ExecUpdate{Result: rec}, false},
				{core.ExecExecuted, core.ExecVerified, core.ExecUpdate{Report: json.RawMessage(`{"ok":true}`), Done: true}, true},
				{core.ExecExecuted, core.ExecFailed, core.ExecUpdate{Reason: "late", Done: true}, false},
			}
			for _, st := range steps {
				var ok bool
				mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
					var err error
					ok, err = tx.TransitionExecution(ctx, "ap1", st.from, st.to, st.u)
					return nil, err
				})
				if ok != st.want {
					t.Errorf("%s → %s: ok = %v, want %v", st.from, st.to, ok, st.want)
				}
			}
			e, err := s.GetExecution(ctx, "ap1")
			if err != nil {
				t.Fatal(err)
			}
			if e.Status != core.ExecVerified || e.Result == nil || e.Result.Stdout != "ok\n" || e.Reason != "" ||
				e.StartedAt.IsZero() || e.FinishedAt.IsZero() || string(e.Report) == "" {
				t.Fatalf("execution after its life cycle: %+v", e)
			}
		})
	}
}

// TestTransitionLocksApprovalFirst: an execution's transition takes the
// approval's key-share lock before it touches the execution's row (the
// lock order a tap keeps: approval, then execution; see
// TransitionExecution), now that both are one statement. While a tap's
// transaction holds the approval, the transition waits — and the
// execution's row is still free for that tap to lock.
func TestTransitionLocksApprovalFirst(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	insertApproval(t, ctx, s, "ap1", true)

	tap, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Rollback(context.Background())
	if _, err := tap.Exec(ctx, `SELECT FROM approvals WHERE id = 'ap1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	type result struct {
		ok  bool
		err error
	}
	done := make(chan result, 1)
	go func() {
		var ok bool
		err := s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			var err error
			ok, err = tx.TransitionExecution(ctx, "ap1", core.ExecQueued, core.ExecRunning, core.ExecUpdate{Started: true})
			return nil, err
		})
		done <- result{ok, err}
	}()
	// The transition waits for the approval's lock.
	deadline := time.Now().Add(10 * time.Second)
	for queryInt(t, ctx, s, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) == 0 {
		select {
		case r := <-done:
			t.Fatalf("the transition did not wait for the approval held by a tap (ok %v, err %v)", r.ok, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the transition neither waited for the approval's lock nor finished")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Meanwhile it holds nothing of the execution: the tap can still lock
	// the row (GetExecution: FOR SHARE) without waiting.
	if _, err := tap.Exec(ctx, `SELECT FROM executions WHERE approval_id = 'ap1' FOR SHARE NOWAIT`); err != nil {
		t.Fatalf("the waiting transition had locked the execution's row already: %v", err)
	}
	if err := tap.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || !r.ok {
		t.Fatalf("transition after the tap: ok %v, err %v; want applied", r.ok, r.err)
	}
}
