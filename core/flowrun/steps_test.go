package flowrun

import (
	"context"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/consent"
	"github.com/silas-gateway/silas/core/store"
)

const stepsFlow = `name: steps
version: "1"
nodes:
  - {id: a, type: action.shell, config: {command: "echo a"}}
  - {id: g, type: control.gate, config: {prompt: "ok?", choices: ["yes", "no"]}}
  - {id: w, type: control.wait, config: {until: deployed}}
  - {id: b, type: action.shell, config: {command: "echo b"}}
  - {id: c, type: action.shell, config: {command: "echo c"}}
edges:
  - {from: a, to: b}
  - {from: b, to: c}
`

// /flow skip and /flow done through the flow execution gate, on the
// runtime: each refusal the runtime can reach is named, audited
// (consent.refused with its code) and changes nothing; accepted requests
// move the run — a done only with verified evidence (or for a wait), a
// skip closing the step's card and the run going on past it.
func TestSkipAndDone(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{"steps.yaml": stepsFlow})
	run := b.start(t, "steps")
	short := ShortID(run)
	st := core.StoredTurn{Seq: 5, Turn: origin()}
	ask := func(t *testing.T, op, arg string, want consent.Code) *shown {
		t.Helper()
		out := b.inTurn(t, func(ctx context.Context, tx *store.Tx, o core.TaskOut) error {
			if op == "skip" {
				return b.rt.Skip(ctx, tx, st, core.TrustOwner, arg, o)
			}
			return b.rt.Done(ctx, tx, st, core.TrustOwner, arg, o)
		})
		var got consent.Code
		for _, e := range out.audit {
			if e.Kind == audit.KindConsentRefused {
				got = consent.Code(e.Data["code"].(string))
			}
		}
		if got != want {
			t.Fatalf("/flow %s %s: refused %q, want %q (replies %q)", op, arg, got, want, out.replies)
		}
		return out
	}
	before := b.statuses(t, run)
	if before != "a=running g=running w=running b=pending c=pending" {
		t.Fatalf("start: %s", before)
	}
	// Both switches off (the default): every request is refused.
	ask(t, "skip", short+" a policy", consent.RunWritesDisabled)
	b.rt.cfg.Switches = consent.Switches{RunWrites: true}

	for _, tc := range []struct {
		op, arg string
		want    consent.Code
	}{
		{"skip", short + " a", consent.BadRequest},
		{"skip", short + " a felt_like_it", consent.BadRequest},
		{"done", short, consent.BadRequest},
		{"skip", short + " nosuch policy", consent.BadRequest},
		{"skip", "feedbeef a policy", consent.UnknownRun},
		{"skip", short + " b policy", consent.OutOfOrder},
		{"done", short + " b", consent.OutOfOrder},
		{"done", short + " a", consent.VerificationUnsatisfied},
		{"done", short + " g", consent.VerificationUnsatisfied},
	} {
		ask(t, tc.op, tc.arg, tc.want)
	}
	if got := b.statuses(t, run); got != before {
		t.Fatalf("refusals changed the run: %s", got)
	}
	// Someone who may not steer the run is told so; nothing changes.
	other := st
	other.Turn.Sender = "web:other"
	out := b.inTurn(t, func(ctx context.Context, tx *store.Tx, o core.TaskOut) error {
		return b.rt.Skip(ctx, tx, other, core.TrustAuth, short+" a policy", o)
	})
	if len(out.replies) != 1 || !strings.Contains(out.replies[0], "Only %s or an owner") {
		t.Fatalf("replies = %q", out.replies)
	}

	// a's card is approved and its action executing: it cannot be
	// skipped, nor marked done before it verified.
	id := b.open(t)["echo a"]
	approve := func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		_, err := tx.GetApproval(ctx, id) // read first, as the store asks
		if err == nil {
			_, err = tx.TransitionApproval(ctx, id, []core.ApprovalStatus{core.ApprovalPending}, core.ApprovalApproved, owner, []byte("t"))
		}
		if err == nil {
			err = tx.QueueExecution(id)
		}
		return nil, err
	}
	if err := b.st.Do(b.ctx, approve); err != nil {
		t.Fatal(err)
	}
	ask(t, "skip", short+" a policy", consent.InProgress)
	ask(t, "done", short+" a", consent.VerificationUnsatisfied)
	// Verified (the step job not run yet): done delivers the verified
	// outcome, and b starts.
	verified := func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		_, err := tx.TransitionExecution(ctx, id, core.ExecQueued, core.ExecVerified, core.ExecUpdate{Result: &core.ExecRecord{ExitCode: 0, Stdout: "a\n"}})
		return nil, err
	}
	if err := b.st.Do(b.ctx, verified); err != nil {
		t.Fatal(err)
	}
	ask(t, "done", short+" a", "")
	if got := b.output(t, run, "a"); got["verified"] != true || got["stdout"] != "a\n" {
		t.Fatalf("a's output = %v", got)
	}
	// A wait is marked done on a person's word.
	ask(t, "done", short+" w", "")
	if got := b.output(t, run, "w"); got["waited"] != "done" {
		t.Fatalf("w's output = %v", got)
	}
	if got := b.statuses(t, run); got != "a=succeeded g=running w=succeeded b=running c=pending" {
		t.Fatalf("after done: %s", got)
	}
	// b is skipped while its card waits: the card is closed, c starts.
	bid := b.open(t)["echo b"]
	ask(t, "skip", short+" b not_applicable", "")
	if a, _ := b.st.GetApproval(b.ctx, bid); a.Status != core.ApprovalDeclined {
		t.Fatalf("b's approval = %s", a.Status)
	}
	if got := b.statuses(t, run); got != "a=succeeded g=running w=succeeded b=skipped c=running" {
		t.Fatalf("after skip: %s", got)
	}
	ask(t, "skip", short+" b policy", consent.OutOfOrder)
	if n := b.count(t, `SELECT count(*) FROM audit_log WHERE kind = 'flow.step_skipped' AND data->>'reason' = 'not_applicable'`); n != 1 {
		t.Fatalf("flow.step_skipped entries = %d", n)
	}
	if n := b.count(t, `SELECT count(*) FROM audit_log WHERE kind = 'flow.step_done'`); n != 2 {
		t.Fatalf("flow.step_done entries = %d", n)
	}

	// A run whose pinned flow no longer loads, then a run that ended.
	second := b.start(t, "steps")
	if _, err := b.st.Pool().Exec(b.ctx, `UPDATE flow_runs SET flow_hash = 'edited' WHERE id = $1`, second); err != nil {
		t.Fatal(err)
	}
	ask(t, "skip", ShortID(second)+" a policy", consent.UnknownFlow)
	b.inTurn(t, func(ctx context.Context, tx *store.Tx, o core.TaskOut) error {
		return b.rt.Stop(ctx, tx, st, core.TrustOwner, short, o)
	})
	ask(t, "skip", short+" c policy", consent.RunNotInProgress)
	if n := b.count(t, `SELECT count(*) FROM audit_log WHERE kind = 'consent.refused'`); n != 15 {
		t.Fatalf("consent.refused entries = %d, want 15", n)
	}
}
