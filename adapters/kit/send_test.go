package kit

import (
	"errors"
	"fmt"
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

func TestSendParts(t *testing.T) {
	card := &cards.Card{ID: "c1"}
	tests := []struct {
		name      string
		m         core.OutMessage
		parts     []string
		textParts int
		want      core.MessageRef
		wantErr   bool
	}{
		{name: "nothing", m: core.OutMessage{Conversation: "x"}, wantErr: true},
		{name: "one part", m: core.OutMessage{Conversation: "x", Text: "a"}, parts: []string{"a"}, textParts: 1, want: "ref-0"},
		{name: "text parts: the first names the message", m: core.OutMessage{Conversation: "x", Text: "ab"}, parts: []string{"a", "b"}, textParts: 2, want: "ref-0"},
		{name: "text and card: the card names it", m: core.OutMessage{Conversation: "x", Text: "a", Card: card}, parts: []string{"a", "card"}, textParts: 1, want: "ref-1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var sent []string
			got, err := SendParts(NewSplits(nil), tc.m, tc.parts, tc.textParts, "test", func(i int, p string) (core.MessageRef, error) {
				sent = append(sent, p)
				return core.MessageRef(fmt.Sprintf("ref-%d", i)), nil
			})
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("got %q, %v; want %q (error %v)", got, err, tc.want, tc.wantErr)
			}
			if !tc.wantErr && len(sent) != len(tc.parts) {
				t.Fatalf("sent %v, want every part once", sent)
			}
		})
	}
}

// A retry after a failed part resumes after the parts already sent.
func TestSendPartsResumes(t *testing.T) {
	s := NewSplits(nil)
	m := core.OutMessage{Conversation: "x", Text: "abc"}
	parts := []string{"a", "b", "c"}
	var sent []string
	fail := true
	send := func(i int, p string) (core.MessageRef, error) {
		if p == "b" && fail {
			fail = false
			return "", errors.New("boom")
		}
		sent = append(sent, p)
		return core.MessageRef(p), nil
	}
	if _, err := SendParts(s, m, parts, 3, "test", send); err == nil {
		t.Fatal("the failed part was not reported")
	}
	got, err := SendParts(s, m, parts, 3, "test", send)
	if err != nil || got != "a" || fmt.Sprint(sent) != "[a b c]" {
		t.Fatalf("got %q, %v, sent %v; want \"a\" and every part once", got, err, sent)
	}
}

func TestTextParts(t *testing.T) {
	if p := TextParts("  \n ", 10, func(rune) int { return 1 }); p != nil {
		t.Fatalf("blank text gave parts %q", p)
	}
	for _, p := range TextParts("line one\n\n\n\nline two", 9, func(rune) int { return 1 }) {
		if p == "" || len(p) > 9 {
			t.Fatalf("part %q", p)
		}
	}
}
