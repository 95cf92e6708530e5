package core

import (
	"errors"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/cards"
)

func TestTurnValidate(t *testing.T) {
	good := Turn{Channel: "telegram", Conversation: "telegram:42", Sender: "telegram:42", EventID: "u1",
		ChatKind: ChatDirect, Text: "hi", Evidence: Evidence{Authenticated: true, Method: "x"}}
	tests := []struct {
		name string
		mod  func(*Turn)
		want string // "" = valid
	}{
		{"good", func(*Turn) {}, ""},
		{"good tap", func(t *Turn) { t.Text, t.Tap = "", &Tap{Card: "abc", Choice: "approve"} }, ""},
		{"group", func(t *Turn) { t.ChatKind = ChatGroup }, ""},
		{"no chat kind", func(t *Turn) { t.ChatKind = "" }, ""},
		{"no channel", func(t *Turn) { t.Channel = "" }, "channel"},
		{"foreign conversation", func(t *Turn) { t.Conversation = "webchat:42" }, "does not belong"},
		{"conversation prefix only", func(t *Turn) { t.Conversation = "telegram:" }, "does not belong"},
		{"prefix without colon", func(t *Turn) { t.Conversation = "telegramx:1" }, "does not belong"},
		{"sender without platform", func(t *Turn) { t.Sender = "42" }, "identity"},
		{"sender without id", func(t *Turn) { t.Sender = "telegram:" }, "identity"},
		{"no event id", func(t *Turn) { t.EventID = "" }, "event id"},
		{"long event id", func(t *Turn) { t.EventID = strings.Repeat("e", MaxEventID+1) }, "event id"},
		{"unauthenticated", func(t *Turn) { t.Evidence.Authenticated = false }, "unauthenticated"},
		{"unknown chat kind", func(t *Turn) { t.ChatKind = "private" }, "chat kind"},
		{"invalid utf-8", func(t *Turn) { t.Text = "a\xffb" }, "UTF-8"},
		{"tap without card", func(t *Turn) { t.Tap = &Tap{Choice: "approve"} }, "malformed tap"},
		{"tap without choice", func(t *Turn) { t.Tap = &Tap{Card: "c"} }, "malformed tap"},
		{"tap with long choice", func(t *Turn) { t.Tap = &Tap{Card: "c", Choice: strings.Repeat("x", MaxTapChoice+1)} }, "malformed tap"},
		{"tap with long card", func(t *Turn) { t.Tap = &Tap{Card: cardsID(MaxTapCard + 1), Choice: "x"} }, "malformed tap"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := good
			tt.mod(&tr)
			err := tr.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v; want valid", err)
				}
				return
			}
			var rej *RejectedError
			if !errors.As(err, &rej) || !strings.Contains(rej.Reason, tt.want) {
				t.Fatalf("Validate = %v; want a rejection naming %q", err, tt.want)
			}
		})
	}
}

func cardsID(n int) cards.ID { return cards.ID(strings.Repeat("c", n)) }
