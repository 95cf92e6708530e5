package webchat

import (
	"strings"
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// The text fallback in the web chat: a typed "approve <id>" is delivered
// as the Tap the card's button sends (same card, same choice, no text), so
// the core validates it exactly like a button; other text stays a message.
func TestTypedTapBecomesATap(t *testing.T) {
	t.Parallel()
	a, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	id := core.NewID()
	tests := []struct {
		name string
		text string
		tap  *core.Tap
	}{
		{"approve", "approve " + id, &core.Tap{Card: cards.ID(id), Choice: "approve"}},
		{"decline in capitals, quoted", `"Decline ` + strings.ToUpper(id) + `"`, &core.Tap{Card: cards.ID(id), Choice: "decline"}},
		{"confirm", "  confirm " + id + " ", &core.Tap{Card: cards.ID(id), Choice: "confirm"}},
		{"a number needs a quoted card", "1", nil},
		{"an id of the wrong shape", "approve " + id[:20], nil},
		{"a sentence", "please approve " + id, nil},
		{"a command", "/run echo approve " + id, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			turn := a.frameTurn(ClientFrame{Type: "message", ID: "m-1", Text: tt.text})
			if err := turn.Validate(); err != nil {
				t.Fatal(err)
			}
			if turn.EventID != "m:m-1" {
				t.Fatalf("event id %q", turn.EventID)
			}
			if tt.tap == nil {
				if turn.Tap != nil || turn.Text != tt.text {
					t.Fatalf("turn = %+v; want the text %q", turn, tt.text)
				}
				return
			}
			if turn.Tap == nil || *turn.Tap != *tt.tap || turn.Text != "" {
				t.Fatalf("turn = %+v; want the tap %+v", turn, *tt.tap)
			}
		})
	}
}
