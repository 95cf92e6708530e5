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

func TestFlowThroughTelegram(t *testing.T) {
	t.Parallel()
	srv := telegramtest.NewServer(t, telegramtest.Options{})
	dsn := storetest.NewDatabase(t)
	data, flows := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(flows, "tg.yaml"), []byte(telegramFlow), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, dsn, data, "SILAS_TELEGRAM_ENABLED=true", "SILAS_TELEGRAM_TOKEN="+srv.Token, "SILAS_TELEGRAM_BASE_URL="+srv.URL,
		"SILAS_TELEGRAM_DM_POLICY=open", "SILAS_TELEGRAM_POLL_TIMEOUT=1s", "SILAS_TELEGRAM_BOT_USERNAME="+srv.BotUsername,
		"SILAS_IDENTITIES_OWNERS=webchat:local,telegram:1001", "SILAS_FLOWS_DIR="+flows)
	olive := telegramtest.User{ID: 1001, FirstName: "Olive"}
	chat := telegramtest.Private(olive)

	// waitFor polls the chat for a bot message that satisfies ok.
	waitFor := func(what string, ok func(m telegramtest.Message) bool) telegramtest.Message {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			for _, m := range srv.Messages(olive.ID) {
				if ok(m) {
					return m
				}
			}
			if time.Now().After(deadline) {
				var seen []string
				for _, m := range srv.Messages(olive.ID) {
					seen = append(seen, m.Text)
				}
				t.Fatalf("no %s; messages:\n%s\nlogs:\n%s", what, strings.Join(seen, "\n---\n"), s.logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// button is the callback data of m's button labelled label, or for
	// choice id label.
	button := func(m telegramtest.Message, label string) string {
		t.Helper()
		for _, row := range m.Keyboard {
			for _, b := range row {
				if strings.EqualFold(b.Text, label) || strings.HasSuffix(b.CallbackData, ":"+label) {
					return b.CallbackData
				}
			}
		}
		t.Fatalf("no button %q on %q: %+v", label, m.Text, m.Keyboard)
		return ""
	}

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

	approval := waitFor("the approval card", func(m telegramtest.Message) bool {
		return strings.Contains(m.Text, "echo ran > ran") && len(m.Keyboard) > 0 && !strings.Contains(m.Text, "Flow tg")
	})
	srv.Tap(chat, olive, approval.ID, button(approval, "approve"))
	confirm := waitFor("the confirmation", func(m telegramtest.Message) bool {
		return m.ID == approval.ID && strings.Contains(fmtKeyboard(m), ":confirm")
	})
	srv.Tap(chat, olive, approval.ID, button(confirm, "confirm"))

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
