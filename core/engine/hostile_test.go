package engine_test

import (
	"strings"
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// A NUL or invalid UTF-8 from anyone is stored with the character replaced
// (the turn notes it) and answered; the conversation is not stuck.
func TestUnstorableTextIsSanitizedAtIntake(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		turn   core.Turn
		fields []string
	}{
		{name: "nul in text", turn: core.Turn{Sender: owner, Text: "hi\x00"}, fields: []string{"text"}},
		{name: "invalid utf-8 in text", turn: core.Turn{Sender: owner, Text: "hi\xff\xfe"}, fields: []string{"text"}},
		{name: "nul in name and event id", turn: core.Turn{Sender: "test:str\x00anger", SenderName: "Eve\x00", Text: "x"},
			fields: []string{"sender_name", "event_id", "sender"}},
	}
	b := setup(t)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			turn := tc.turn
			turn.Channel, turn.Conversation, turn.Evidence = "test", "test:chat", core.Evidence{Authenticated: true, Method: "test"}
			turn.EventID = "hostile-" + string(rune('a'+i))
			if tc.turn.SenderName != "" {
				turn.EventID += "\x00"
			}
			res, err := b.eng.Deliver(b.ctx, turn)
			if err != nil {
				t.Fatalf("Deliver: %v", err)
			}
			var body string
			if err := b.st.Pool().QueryRow(b.ctx, `SELECT body::text FROM turns WHERE seq = $1`, res.Seq).Scan(&body); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(body, "\uFFFD") {
				t.Errorf("stored body has no replacement character: %s", body)
			}
			for _, f := range tc.fields {
				if !strings.Contains(body, `"`+f+`"`) {
					t.Errorf("stored turn does not note field %q: %s", f, body)
				}
			}
			// Redelivery of the same event is still a duplicate.
			again, err := b.eng.Deliver(b.ctx, turn)
			if err != nil || !again.Duplicate {
				t.Fatalf("redelivery: %+v, %v", again, err)
			}
		})
	}
	// The conversation goes on: the next message is answered.
	b.send(t, owner, "/whoami")
	b.ch.waitFor(t, "answer to /whoami", func(msgs []core.OutMessage) bool { return textContaining(msgs, "test:owner") })
	var stuck int
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT count(*) FROM turns WHERE status <> 'done'`).Scan(&stuck); err != nil {
		t.Fatal(err)
	}
	if stuck != 0 {
		t.Fatalf("%d turns not done", stuck)
	}
	if _, err := b.st.VerifyAudit(b.ctx); err != nil {
		t.Fatal(err)
	}
}

// Output with NUL and invalid UTF-8 is stored exactly, shown with the
// characters replaced, and the execution reaches execution.finished.
func TestBinaryOutputFinishes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.send(t, owner, `/run printf 'a\0b\377c'`)
	c := b.pendingCard(t, `printf 'a\0b\377c'`)
	if c.Risk != cards.RiskLow {
		t.Fatalf("printf risk = %s, want low (one tap)", c.Risk)
	}
	b.tap(t, owner, c.ID, "approve")
	d := b.waitStatus(t, c.ID, cards.StatusDone)
	if d.Output != "a\uFFFDb\uFFFDc" {
		t.Fatalf("card output = %q", d.Output)
	}
	ex, err := b.st.GetExecution(b.ctx, core.ApprovalID(c.ID))
	if err != nil {
		t.Fatal(err)
	}
	if ex.Result == nil || ex.Result.Stdout != "a\x00b\xffc" {
		t.Fatalf("stored stdout = %+v, want the exact bytes", ex.Result)
	}
	if !auditKinds(t, b)["execution.finished"] {
		t.Fatal("no execution.finished entry")
	}
}

// Bidi controls in user text are shown on the card, not obeyed.
func TestBidiControlsAreVisibleOnCards(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.send(t, owner, "/run echo \u202Efdp.exe")
	c := b.pendingCard(t, "echo '<U+202E>fdp.exe'")
	if strings.ContainsRune(c.Choices[0].Label, '\u202E') || !strings.Contains(c.Choices[0].Label, "<U+202E>") {
		t.Fatalf("label = %q", c.Choices[0].Label)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
