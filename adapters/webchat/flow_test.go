package webchat

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/channeltest"
	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/background/backgroundtest"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/flow"
	"github.com/silas-gateway/silas/core/flowrun"
	coregateway "github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/verify"
	"github.com/silas-gateway/silas/internal/storetest"
)

// A runbook as a person in the web chat lives it: /flow run → the
// progress card → the gate's card → a tap → two parallel action nodes, each
// an ordinary approval card → taps → the sandbox runs them, verification
// judges them → the merge → the branch the outcome selects (a rollback
// when one step failed) → the summary, with the progress card edited to
// its final state.

const deployFlow = `name: deploy
version: "3"
description: two steps in parallel, a merge, roll back when the second fails
inputs:
  second:
    type: string
    default: echo beta
nodes:
  - id: confirm
    type: control.gate
    config:
      prompt: "Deploy now?"
      choices: [go, cancel]
  - id: first
    type: action.shell
    config:
      command: "echo alpha"
  - id: second
    type: action.shell
    config:
      command: "${{ inputs.second }}"
    policy:
      continue_on_error: true
  - id: join
    type: control.merge
  - id: rollback
    type: action.shell
    config:
      command: "echo rolling back"
  - id: report
    type: system.log
    config:
      message: "deployed: ${{ nodes.first.stdout.trim() }}"
edges:
  - {from: confirm, to: first, when: "nodes.confirm.response.choice == 'go'"}
  - {from: confirm, to: second, when: "nodes.confirm.response.choice == 'go'"}
  - {from: first, to: join}
  - {from: second, to: join}
  - {from: join, to: rollback, when: "has(nodes.second.failed)"}
  - {from: join, to: report, when: "!has(nodes.second.failed)"}
`

type flowWeb struct {
	ctx context.Context
	st  *store.Store
	web *conformanceClient
}

func newFlowWeb(t *testing.T) *flowWeb {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := store.Open(ctx, storetest.NewDatabase(t), store.Options{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	sb, err := sandbox.New(sandbox.Config{BaseDir: t.TempDir()})
	if err != nil {
		cancel()
		st.Close()
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "deploy.yaml"), []byte(deployFlow), 0o600); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.New([]policy.Rule{{Name: "default", Tool: "*", Decision: policy.AuthRequired, Risk: cards.RiskLow}})
	if err != nil {
		t.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	logs := &lockedLog{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	web := newConformanceClient(t)
	ch := web.NewChannel(t, st, log)
	eng, err := coregateway.New(coregateway.Config{Store: st, Channels: []core.Channel{ch}, Agent: agent.Command{}, Sandbox: sb,
		Verifier: &verify.Runner{Commands: execute.SandboxChecks{Sandbox: sb}}, Policy: pol, Key: key,
		Owners: []core.IdentityID{web.Identity(channeltest.Approver)}, Logger: log,
		Flows: &flowrun.Config{Catalog: flowrun.Dirs{Sources: []flow.Source{{Label: dir, FS: os.DirFS(dir)}}}, MaxParallel: 4}})
	if err != nil {
		t.Fatal(err)
	}
	engDone, chDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(engDone); _ = eng.Run(ctx, time.Second) }()
	<-eng.Ready()
	stopRoom := backgroundtest.Start(t, st.Pool(), eng.Jobs) // works the flow steps
	go func() { defer close(chDone); _ = ch.Run(ctx, eng) }()
	t.Cleanup(func() { st.Close() })
	t.Cleanup(func() { _ = sb.Close() })
	t.Cleanup(func() { cancel(); <-chDone; <-engDone; stopRoom() })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})
	web.Started(t, ch)
	return &flowWeb{ctx: ctx, st: st, web: web}
}

func (h *flowWeb) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := h.st.Pool().QueryRow(h.ctx, q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func TestFlowThroughTheWebChat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, args string
		rollback   bool
	}{
		{name: "both steps succeed: report", args: ""},
		{name: "second step fails: rollback", args: " second=false", rollback: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newFlowWeb(t)
			web := h.web
			web.Say(t, channeltest.Approver, "/flow run deploy"+tc.args)
			waitShown(t, web, "the start reply", func(s *shown) bool { return strings.HasPrefix(s.text, "Started flow deploy v3 (run ") })
			progress := waitShown(t, web, "the progress card", func(s *shown) bool {
				return s.card != nil && strings.HasPrefix(s.card.Intent, "Flow deploy v3 — run ")
			})
			gate := waitShown(t, web, "the gate's card", func(s *shown) bool {
				return s.card != nil && s.card.Intent == "Flow deploy asks: Deploy now?" && s.card.Status == cards.StatusPending
			})
			if len(gate.card.Choices) != 2 || gate.card.Choices[0].Label != "go" {
				t.Fatalf("gate card = %+v", gate.card)
			}
			if n := h.count(t, `SELECT count(*) FROM approvals`); n != 0 {
				t.Fatalf("%d approvals before the gate was answered", n)
			}
			web.Tap(t, channeltest.Approver, channeltest.Message{Card: gate.card.ID}, gate.card.Choices[0].ID)
			waitShown(t, web, "the gate answered", func(s *shown) bool {
				return s.card != nil && s.card.ID == gate.card.ID && s.card.Status == cards.StatusDone && strings.Contains(s.card.Outcome, ": go")
			})
			// Both parallel steps ask at once, each an ordinary approval card.
			second := "echo beta"
			if tc.rollback {
				second = "false"
			}
			first := pendingStep(t, web, "echo alpha")
			sec := pendingStep(t, web, second)
			if n := h.count(t, `SELECT count(*) FROM executions`); n != 0 {
				t.Fatalf("%d executions before any tap", n)
			}
			web.Tap(t, channeltest.Approver, channeltest.Message{Card: sec.ID}, "approve")
			web.Tap(t, channeltest.Approver, channeltest.Message{Card: first.ID}, "approve")
			if tc.rollback {
				rb := pendingStep(t, web, "echo rolling back")
				web.Tap(t, channeltest.Approver, channeltest.Message{Card: rb.ID}, "approve")
			}
			sum := waitShown(t, web, "the summary", func(s *shown) bool { return strings.HasPrefix(s.text, "Flow deploy (run ") })
			if !strings.Contains(sum.text, "succeeded.") {
				t.Fatalf("summary = %q", sum.text)
			}
			final := waitShown(t, web, "the progress card's final state", func(s *shown) bool {
				return s.card != nil && s.card.ID == progress.card.ID && s.card.Status == cards.StatusDone
			})
			for _, want := range []string{"✓ confirm", "✓ first", "✓ join"} {
				if !strings.Contains(final.card.Details, want) {
					t.Fatalf("progress card lacks %q:\n%s", want, final.card.Details)
				}
			}
			wantSecond, wantRB, wantReport := "✓ second", "– rollback", "✓ report"
			if tc.rollback {
				wantSecond, wantRB, wantReport = "✗ second", "✓ rollback", "– report"
			}
			for _, want := range []string{wantSecond, wantRB, wantReport} {
				if !strings.Contains(final.card.Details, want) {
					t.Fatalf("progress card lacks %q:\n%s", want, final.card.Details)
				}
			}
			runs := 2
			if tc.rollback {
				runs = 3
			}
			if n := h.count(t, `SELECT count(*) FROM executions`); n != runs {
				t.Fatalf("%d executions, want %d (one per approved action, none twice)", n, runs)
			}
			if n := h.count(t, `SELECT count(*) FROM flow_runs WHERE status = 'succeeded'`); n != 1 {
				t.Fatalf("%d succeeded runs", n)
			}
			if n := h.count(t, `SELECT count(*) FROM flow_attempts WHERE status = 'running'`); n != 0 {
				t.Fatalf("%d attempts still running", n)
			}
			if n := h.count(t, `SELECT count(*) FROM audit_log WHERE kind = 'flow.run_finished'`); n != 1 {
				t.Fatalf("%d run_finished audit entries", n)
			}
			if _, err := h.st.VerifyAudit(h.ctx); err != nil {
				t.Fatalf("audit chain: %v", err)
			}
		})
	}
}
