package decide_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/store"
)

// TestResendNeverRegresses: a tap on the card of a request whose execution
// is being verified re-sends the card's state as of the tap's commit, so
// the last edit queued for the card — the one delivered last — is the
// verdict's "done", never a re-sent "running" (security invariant 9: a
// card never shows a state that did not happen last). The tap and the
// verdict are interleaved deterministically on PostgreSQL, as the
// executor's transition and a replayed tap meet in production: in one
// group-commit transaction, or in two (a second writer, a second
// instance) with the verdict written after the re-send's read, or the
// re-send read while the verdict is half written.
func TestResendNeverRegresses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		// long: the run's output is long, stored under a ref (its
		// foreign key locks the approval's row).
		long bool
		// resend is the status the replayed tap's re-sent card shows
		// ("": either, as long as the verdict's edit comes last).
		resend cards.Status
		run    func(t *testing.T, r *resend)
	}{
		{"verdict earlier in the tap's transaction", false, cards.StatusDone, func(t *testing.T, r *resend) {
			r.do(t, r.b.st, func(ctx context.Context, tx *store.Tx) error {
				if err := r.verdict(ctx, tx); err != nil {
					return err
				}
				return r.tap(ctx, tx)
			})
		}},
		{"verdict after the re-send's read", false, cards.StatusRunning, func(t *testing.T, r *resend) {
			read, release := make(chan struct{}), make(chan struct{})
			tapped := r.async(t, r.b.st, func(ctx context.Context, tx *store.Tx) error {
				err := r.tap(ctx, tx)
				close(read)
				<-release
				return err
			})
			<-read
			judged := r.async(t, r.other(t), r.verdict)
			// The verdict either waits for the tap's locks (the fix) or
			// commits first (the bug: its "done" is then queued before the
			// re-sent "running").
			r.waitBlockedOr(t, judged)
			close(release)
			<-tapped
			<-judged
		}},
		{"re-send while a verdict is half written", true, "", func(t *testing.T, r *resend) {
			written, release := make(chan struct{}), make(chan struct{})
			judged := r.async(t, r.other(t), func(ctx context.Context, tx *store.Tx) error {
				ok, err := tx.TransitionExecution(ctx, r.a.ID, core.ExecRunning, core.ExecVerified, r.update())
				if err != nil || !ok {
					return errOr(err, "verdict: the execution was not running")
				}
				close(written)
				<-release
				return r.queueVerdict(tx)
			})
			<-written
			tapped := r.async(t, r.b.st, r.tap)
			// Locked in opposite orders, the tap and the verdict (storing
			// long output, which takes the approval's key-share lock)
			// would deadlock here.
			r.waitBlockedOr(t, tapped)
			close(release)
			<-judged
			<-tapped
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newResend(t, tt.long)
			tt.run(t, r)
			if r.resent == nil || tt.resend != "" && r.resent.Status != tt.resend {
				t.Errorf("the replayed tap re-sent %+v, want a %s card", r.resent, tt.resend)
			}
			if got := r.lastEdit(t); got != cards.StatusDone {
				t.Errorf("the card's last queued edit shows %q, want %q: a re-sent earlier state would be delivered after the verdict", got, cards.StatusDone)
			}
		})
	}
}

// resend is a request approved and running, a replayed tap on its card and
// the verdict on its execution, each an op for a transaction of the test's
// choosing.
type resend struct {
	b *bundle
	// a is the request as approved.
	a core.ApprovalRequest
	// long: the run's output is stored under a ref.
	long bool
	// resent is the card the replayed tap re-sent.
	resent *cards.Card
}

func newResend(t *testing.T, long bool) *resend {
	t.Helper()
	b := setup(t)
	p := b.propose(t, cards.RiskLow, "echo", "once")
	if r, _, err := b.tap(t, owner, core.TrustOwner, conv, p.ID, "approve"); err != nil || r.Queued != p.ID {
		t.Fatalf("approve = %+v, %v", r, err)
	}
	r := &resend{b: b, long: long}
	r.do(t, b.st, func(ctx context.Context, tx *store.Tx) error {
		var err error
		if r.a, err = tx.GetApproval(ctx, p.ID); err != nil {
			return err
		}
		ok, err := tx.TransitionExecution(ctx, p.ID, core.ExecQueued, core.ExecRunning, core.ExecUpdate{Started: true})
		if err != nil || !ok {
			return errOr(err, "claim: the execution was not queued")
		}
		return nil
	})
	return r
}

// tap is the replayed tap ("approve" again) in tx, its re-sent card queued
// as the engine queues a decision's card updates.
func (r *resend) tap(ctx context.Context, tx *store.Tx) error {
	res, err := r.b.d.Tap(ctx, tx, core.Turn{Channel: "test", Conversation: conv, Sender: owner,
		Tap: &core.Tap{Card: cards.ID(r.a.ID), Choice: "approve"}}, core.TrustOwner)
	if err != nil {
		return err
	}
	if res.Refused != "already_decided" || len(res.Updates) != 1 {
		return errOr(nil, "replayed tap: not refused as already decided with the card re-sent")
	}
	r.resent = res.Updates[0]
	return tx.QueueMessage("test", core.OpUpdate, string(r.resent.ID), core.OutMessage{Conversation: conv, Card: r.resent})
}

// verdict is the executor's transition running → verified in tx: the
// status, the stored output if long and the card's edit.
func (r *resend) verdict(ctx context.Context, tx *store.Tx) error {
	ok, err := tx.TransitionExecution(ctx, r.a.ID, core.ExecRunning, core.ExecVerified, r.update())
	if err != nil || !ok {
		return errOr(err, "verdict: the execution was not running")
	}
	return r.queueVerdict(tx)
}

func (r *resend) update() core.ExecUpdate {
	u := core.ExecUpdate{Result: &core.ExecRecord{Stdout: "once\n"}, Report: []byte(`{"all_passed":true}`),
		Reason: "ran 1ms; verified: exit code 0", Done: true}
	if r.long {
		u.Result.OutputRef = "out-" + string(r.a.ID)
	}
	return u
}

// queueVerdict is the rest of the verdict's transaction, after its
// compare-and-swap: the long output and the card's "done" edit.
func (r *resend) queueVerdict(tx *store.Tx) error {
	u := r.update()
	if r.long {
		if err := tx.QueueOutput(u.Result.OutputRef, r.a.ID, u.Result.Stdout, false); err != nil {
			return err
		}
	}
	ex := core.Execution{ApprovalID: r.a.ID, Status: core.ExecVerified, Result: u.Result, Report: u.Report, Reason: u.Reason}
	return tx.QueueMessage("test", core.OpUpdate, string(r.a.ID), core.OutMessage{Conversation: conv, Card: render.Approval(r.a, &ex, 2000)})
}

// do runs op in a transaction of st.
func (r *resend) do(t *testing.T, st *store.Store, op func(ctx context.Context, tx *store.Tx) error) {
	t.Helper()
	if err := st.Do(r.b.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) { return nil, op(ctx, tx) }); err != nil {
		t.Fatal(err)
	}
}

// async runs op in a transaction of st in the background; the channel is
// closed once it committed (a failure fails the test).
func (r *resend) async(t *testing.T, st *store.Store, op func(ctx context.Context, tx *store.Tx) error) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := st.Do(r.b.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) { return nil, op(ctx, tx) }); err != nil {
			t.Errorf("transaction: %v", err)
		}
	}()
	return done
}

// other is a second store on the test's database: transactions of its
// own writer, as a second writer loop or a second instance has them.
func (r *resend) other(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(r.b.ctx, r.b.st.Pool().Config().ConnString(), store.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// waitBlockedOr waits until a statement on the test's database waits for
// a row lock, or done is closed.
func (r *resend) waitBlockedOr(t *testing.T, done <-chan struct{}) {
	t.Helper()
	for {
		select {
		case <-done:
			return
		default:
		}
		var n int
		if err := r.b.st.Pool().QueryRow(r.b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event IN ('transactionid', 'tuple')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// lastEdit is the status of the card in the last edit queued for it (the
// outbox delivers a card's edits in id order; the last one stays).
func (r *resend) lastEdit(t *testing.T) cards.Status {
	t.Helper()
	var payload []byte
	if err := r.b.st.Pool().QueryRow(r.b.ctx, `SELECT payload FROM outbox WHERE message_key = $1 AND op IN ('update', 'answer')
		ORDER BY id DESC LIMIT 1`, string(r.a.ID)).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	var m core.OutMessage
	if err := json.Unmarshal(payload, &m); err != nil || m.Card == nil {
		t.Fatalf("last edit %s: %v", payload, err)
	}
	return m.Card.Status
}

type testError string

func (e testError) Error() string { return string(e) }

// errOr is err, or msg as an error when err is nil.
func errOr(err error, msg string) error {
	if err != nil {
		return err
	}
	return testError(msg)
}
