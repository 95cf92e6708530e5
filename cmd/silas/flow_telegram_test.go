package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/telegram/telegramtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

// A flow through the real binary and the Telegram fake (the adapter's real
// SDK against it): the gate's card tapped, a second gate answered by a
// plain reply to its card (message injection), the action's approval card
// tapped (approve, confirm), the action run in the sandbox and verified,
// and the progress card edited in place to its final state.

const telegramFlow = `name: tg
version: "1"
description: a gate, a question answered by reply, one action
nodes:
  - id: ask
    type: control.gate
    config:
      prompt: "Write the file?"
      choices: [yes, no]
  - id: why
    type: control.gate
    config:
      prompt: "Why?"
      allow_text: true
  - id: write
    type: action.shell
    config:
      command: "sh -c 'echo ran > ran'"
      expect:
        - {name: wrote, file_exists: ran}
  - id: done
    type: system.log
    config:
      message: "wrote it because ${{ nodes.why.response.content }}"
edges:
  - {from: ask, to: why, when: "nodes.ask.response.choice == 'yes'"}
  - {from: why, to: write}
  - {from: write, to: done}
`

// tgFlow is the serving binary with the Telegram fake and one person,
// Olive (an owner), in her private chat with the bot.
type tgFlow struct {
	t     *testing.T
	srv   *telegramtest.Server
	s     *server
	dsn   string
	data  string
	olive telegramtest.User
	chat  telegramtest.Chat
}

func startTelegramFlows(t *testing.T, files map[string]string) *tgFlow {
	t.Helper()
	// The flows are about their steps, not Telegram's pace: at its one
	// message a second per chat, the cards and notes of one flow took most
	// of the test's time. The adapter and the fake share a fifth of it
	// (the adapter through its documented key; the fake's slack the same
	// share of the interval as at Telegram's).
	srv := telegramtest.NewServer(t, telegramtest.Options{Limits: fastTelegramLimits})
	dsn := storetest.NewDatabase(t)
	data, flows := t.TempDir(), t.TempDir()
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(flows, name), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := startServer(t, dsn, data, "SILAS_TELEGRAM_ENABLED=true", "SILAS_TELEGRAM_TOKEN="+srv.Token, "SILAS_TELEGRAM_BASE_URL="+srv.URL,
		"SILAS_TELEGRAM_DM_POLICY=open", "SILAS_TELEGRAM_POLL_TIMEOUT=1s", "SILAS_TELEGRAM_BOT_USERNAME="+srv.BotUsername,
		"SILAS_IDENTITIES_OWNERS=webchat:local,telegram:1001", "SILAS_FLOWS_DIR="+flows, fastTelegramEnv)
	olive := telegramtest.User{ID: 1001, FirstName: "Olive"}
	return &tgFlow{t: t, srv: srv, s: s, dsn: dsn, data: data, olive: olive, chat: telegramtest.Private(olive)}
}

// waitFor polls the chat for a bot message that satisfies ok.
func (h *tgFlow) waitFor(what string, ok func(m telegramtest.Message) bool) telegramtest.Message {
	h.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		for _, m := range h.srv.Messages(h.olive.ID) {
			if ok(m) {
				return m
			}
		}
		if time.Now().After(deadline) {
			var seen []string
			for _, m := range h.srv.Messages(h.olive.ID) {
				seen = append(seen, m.Text)
			}
			h.t.Fatalf("no %s; messages:\n%s\nlogs:\n%s", what, strings.Join(seen, "\n---\n"), h.s.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// button is the callback data of m's button labelled label, or for
// choice id label.
func (h *tgFlow) button(m telegramtest.Message, label string) string {
	h.t.Helper()
	for _, row := range m.Keyboard {
		for _, b := range row {
			if strings.EqualFold(b.Text, label) || strings.HasSuffix(b.CallbackData, ":"+label) {
				return b.CallbackData
			}
		}
	}
	h.t.Fatalf("no button %q on %q: %+v", label, m.Text, m.Keyboard)
	return ""
}

// approve waits for the approval card of command (not the progress
// card, which names the flow) and taps approve, then confirm when the
// risk asks for a second tap.
func (h *tgFlow) approve(command, flowName string) {
	h.t.Helper()
	approval := h.waitFor("the approval card of "+command, func(m telegramtest.Message) bool {
		return strings.Contains(m.Text, command) && len(m.Keyboard) > 0 && !strings.Contains(m.Text, "Flow "+flowName) &&
			strings.Contains(fmtKeyboard(m), ":approve")
	})
	h.srv.Tap(h.chat, h.olive, approval.ID, h.button(approval, "approve"))
	next := h.waitFor("the decision on "+command, func(m telegramtest.Message) bool {
		return m.ID == approval.ID && (strings.Contains(fmtKeyboard(m), ":confirm") || !strings.Contains(fmtKeyboard(m), ":approve"))
	})
	if strings.Contains(fmtKeyboard(next), ":confirm") {
		h.srv.Tap(h.chat, h.olive, approval.ID, h.button(next, "confirm"))
	}
}

func TestFlowThroughTelegram(t *testing.T) {
	t.Parallel()
	h := startTelegramFlows(t, map[string]string{"tg.yaml": telegramFlow})
	srv, dsn, data, olive, chat, waitFor, button := h.srv, h.dsn, h.data, h.olive, h.chat, h.waitFor, h.button

	srv.SendMessage(telegramtest.Msg{Chat: chat, From: olive, Text: "/flow run tg"})
	progress := waitFor("progress card", func(m telegramtest.Message) bool { return strings.Contains(m.Text, "Flow tg v1 — run ") })
	ask := waitFor("the gate's card", func(m telegramtest.Message) bool {
		return strings.Contains(m.Text, "Write the file?") && len(m.Keyboard) > 0
	})
	srv.Tap(chat, olive, ask.ID, button(ask, "yes"))

	why := waitFor("the question's card", func(m telegramtest.Message) bool { return strings.Contains(m.Text, "Why?") })
	// The fake shows the card as soon as sendMessage is called; serve
	// records which card the message is once the call returns. A person
	// replies seconds later; the test waits for that record instead.
	for deadline := time.Now().Add(30 * time.Second); dbCount(t, dsn, `SELECT count(*) FROM sent_messages WHERE channel = 'telegram' AND ref = $1`,
		fmt.Sprintf("%d:%d", chat.ID, why.ID)) != 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the question's card %d was never recorded as sent", why.ID)
		}
	}
	// A plain reply to the question's card is its answer.
	srv.SendMessage(telegramtest.Msg{Chat: chat, From: olive, Text: "the disk is full", ReplyTo: why.ID})

	h.approve("echo ran > ran", "tg")

	final := waitFor("the progress card's final state", func(m telegramtest.Message) bool {
		return m.ID == progress.ID && strings.Contains(m.Text, "✓ write") && strings.Contains(m.Text, "✓ done")
	})
	if final.Edits == 0 {
		t.Fatalf("the progress card was not edited in place")
	}
	waitFor("the summary", func(m telegramtest.Message) bool { return strings.Contains(m.Text, "Flow tg (run ") })
	runs, _ := filepath.Glob(filepath.Join(data, "sandbox", "exec-*", "ran"))
	if len(runs) != 1 {
		t.Fatalf("the action ran %d times, want exactly 1", len(runs))
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM flow_runs WHERE status = 'succeeded'`); n != 1 {
		t.Fatalf("succeeded runs = %d", n)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM executions WHERE status = 'verified'`); n != 1 {
		t.Fatalf("verified executions = %d", n)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM audit_log WHERE kind = 'flow.log' AND data->>'message' = 'wrote it because the disk is full'`); n != 1 {
		t.Fatalf("the reply did not reach the run")
	}
}

func fmtKeyboard(m telegramtest.Message) string {
	var b strings.Builder
	for _, row := range m.Keyboard {
		for _, k := range row {
			b.WriteString(k.CallbackData + " ")
		}
	}
	return b.String()
}

// The end-to-end shape through the Telegram fake: a gate, two
// action nodes in parallel (both cards at once), a merge, and a rollback
// branch taken because the second action failed (continue_on_error) —
// each action an ordinary approval card tapped; the run reaches its
// summary and the progress card its final state; every approved action
// ran exactly once.
const tgDeployFlow = `name: deploy
version: "1"
description: two steps in parallel, a merge, roll back when the second fails
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
      command: "sh -c 'echo beta; exit 3'"
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
      message: "deployed"
edges:
  - {from: confirm, to: first, when: "nodes.confirm.response.choice == 'go'"}
  - {from: confirm, to: second, when: "nodes.confirm.response.choice == 'go'"}
  - {from: first, to: join}
  - {from: second, to: join}
  - {from: join, to: rollback, when: "has(nodes.second.failed)"}
  - {from: join, to: report, when: "!has(nodes.second.failed)"}
`

func TestFlowDeployRollbackThroughTelegram(t *testing.T) {
	t.Parallel()
	h := startTelegramFlows(t, map[string]string{"deploy.yaml": tgDeployFlow})
	h.srv.SendMessage(telegramtest.Msg{Chat: h.chat, From: h.olive, Text: "/flow run deploy"})
	progress := h.waitFor("progress card", func(m telegramtest.Message) bool { return strings.Contains(m.Text, "Flow deploy v1 — run ") })
	gate := h.waitFor("the gate's card", func(m telegramtest.Message) bool {
		return strings.Contains(m.Text, "Deploy now?") && len(m.Keyboard) > 0
	})
	if n := dbCount(t, h.dsn, `SELECT count(*) FROM approvals`); n != 0 {
		t.Fatalf("%d approvals before the gate was answered", n)
	}
	h.srv.Tap(h.chat, h.olive, gate.ID, h.button(gate, "go"))
	// Both parallel actions ask before either is tapped.
	for _, cmd := range []string{"echo alpha", "exit 3"} {
		h.waitFor("the approval card of "+cmd, func(m telegramtest.Message) bool {
			return strings.Contains(m.Text, cmd) && strings.Contains(fmtKeyboard(m), ":approve")
		})
	}
	if n := dbCount(t, h.dsn, `SELECT count(*) FROM executions`); n != 0 {
		t.Fatalf("%d executions before any tap", n)
	}
	h.approve("exit 3", "deploy")
	h.approve("echo alpha", "deploy")
	h.approve("echo rolling back", "deploy")
	final := h.waitFor("the progress card's final state", func(m telegramtest.Message) bool {
		return m.ID == progress.ID && strings.Contains(m.Text, "✓ rollback")
	})
	for _, want := range []string{"✓ confirm", "✓ first", "✗ second", "✓ join", "✓ rollback", "– report"} {
		if !strings.Contains(final.Text, want) {
			t.Fatalf("progress card lacks %q:\n%s", want, final.Text)
		}
	}
	if final.Edits == 0 {
		t.Fatalf("the progress card was not edited in place")
	}
	h.waitFor("the summary", func(m telegramtest.Message) bool {
		return strings.Contains(m.Text, "Flow deploy (run ") && strings.Contains(m.Text, "succeeded")
	})
	if n := dbCount(t, h.dsn, `SELECT count(*) FROM executions`); n != 3 {
		t.Fatalf("%d executions, want 3 (one per approved action, none twice)", n)
	}
	if n := dbCount(t, h.dsn, `SELECT count(*) FROM executions WHERE status = 'failed'`); n != 1 {
		t.Fatalf("%d failed executions, want 1 (the second step)", n)
	}
	if n := dbCount(t, h.dsn, `SELECT count(*) FROM flow_runs WHERE status = 'succeeded'`); n != 1 {
		t.Fatalf("succeeded runs = %d", n)
	}
}
