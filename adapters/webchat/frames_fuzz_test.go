package webchat

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseFrame(t *testing.T) {
	t.Parallel()
	long := make([]byte, MaxTextChars+1)
	for i := range long {
		long[i] = 'a'
	}
	tests := []struct {
		name string
		in   string
		code string
	}{
		{"message", `{"type":"message","id":"m-1","text":"/run uname -a"}`, ""},
		{"tap", `{"type":"tap","id":"t-1","card_id":"abc","choice":"approve"}`, ""},
		{"not json", `hello`, "bad_frame"},
		{"array", `[1]`, "bad_frame"},
		{"two objects", `{"type":"message","id":"a","text":"x"} {}`, "bad_frame"},
		{"unknown field", `{"type":"message","id":"a","text":"x","admin":true}`, "bad_frame"},
		{"bad id", `{"type":"message","id":"a b","text":"x"}`, "bad_frame"},
		{"empty text", `{"type":"message","id":"a","text":""}`, "bad_frame"},
		{"too long", `{"type":"message","id":"a","text":"` + string(long) + `"}`, "too_large"},
		{"tap without card", `{"type":"tap","id":"a","choice":"approve"}`, "bad_frame"},
		{"tap with odd card", `{"type":"tap","id":"a","card_id":"../x","choice":"approve"}`, "bad_frame"},
		{"unknown type", `{"type":"shutdown","id":"a"}`, "unknown_type"},
		{"no type", `{"id":"a"}`, "bad_frame"},
		{"nul in text", `{"type":"message","id":"a","text":"hi\u0000"}`, "bad_text"},
		{"raw invalid utf-8", "{\"type\":\"message\",\"id\":\"a\",\"text\":\"hi\xff\"}", "bad_text"},
		{"escaped backslash is fine", `{"type":"message","id":"a","text":"\\u0000"}`, ""},
	}
	// An error answer echoes the frame's id whenever the frame had a valid one.
	var fe *FrameError
	if _, err := ParseFrame([]byte(`{"type":"message","id":"m-7","text":"x","admin":true}`)); !errors.As(err, &fe) || fe.ID != "m-7" {
		t.Errorf("unknown field: error %v does not echo the id m-7", err)
	}
	if _, err := ParseFrame([]byte(`{"type":"message","id":"a b","text":"x","admin":true}`)); !errors.As(err, &fe) || fe.ID != "" {
		t.Errorf("an invalid id must not be echoed: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseFrame([]byte(tt.in))
			var fe *FrameError
			switch {
			case tt.code == "" && err != nil:
				t.Fatalf("ParseFrame = %v, want ok", err)
			case tt.code != "" && (!errors.As(err, &fe) || fe.Code != tt.code):
				t.Fatalf("ParseFrame = %v, want code %s", err, tt.code)
			}
		})
	}
}

func FuzzParseFrame(f *testing.F) {
	for _, s := range []string{
		`{"type":"message","id":"m-1","text":"/run uname -a"}`,
		`{"type":"tap","id":"t-1","card_id":"abc","choice":"approve"}`,
		`{"type":"tap","id":"t-1","card_id":"abc","choice":"approve","text":"x"}`,
		`{}`, `null`, `"x"`, `{"type":"message","id":"` + "\xff" + `"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := ParseFrame(b)
		if err != nil {
			var fe *FrameError
			if !errors.As(err, &fe) || fe.Code == "" || fe.Message == "" {
				t.Fatalf("error %v is not a coded FrameError", err)
			}
			if fe.ID != "" && !clientIDRe.MatchString(fe.ID) {
				t.Fatalf("error echoes an invalid id %q", fe.ID)
			}
			return
		}
		// Accepted frames satisfy the protocol's invariants.
		if !clientIDRe.MatchString(fr.ID) {
			t.Fatalf("accepted bad id %q", fr.ID)
		}
		switch fr.Type {
		case "message":
			if !utf8.ValidString(fr.Text) || strings.IndexByte(fr.Text, 0) >= 0 || fr.Text == "" || utf8.RuneCountInString(fr.Text) > MaxTextChars {
				t.Fatalf("accepted bad text")
			}
		case "tap":
			if fr.CardID == "" || fr.Choice == "" {
				t.Fatalf("accepted incomplete tap")
			}
		default:
			t.Fatalf("accepted type %q", fr.Type)
		}
		if _, err := json.Marshal(fr); err != nil {
			t.Fatal(err)
		}
	})
}
