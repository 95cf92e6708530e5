package webchat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"unicode/utf8"

	"github.com/silas-gateway/silas/cards"
)

// Limits of the protocol (docs/webchat-protocol.md).
const (
	MaxFrameBytes = 64 << 10
	MaxTextChars  = 16000
)

var clientIDRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ClientFrame is a frame from the browser.
type ClientFrame struct {
	Type   string `json:"type"`
	ID     string `json:"id"`
	Text   string `json:"text,omitempty"`
	CardID string `json:"card_id,omitempty"`
	Choice string `json:"choice,omitempty"`
}

// FrameError is a protocol error with the code sent back to the client.
type FrameError struct {
	Code    string
	ID      string
	Message string
}

func (e *FrameError) Error() string { return e.Code + ": " + e.Message }

// ParseFrame decodes and validates one client frame. Every way it can fail
// yields a *FrameError with a code from the protocol.
func ParseFrame(b []byte) (ClientFrame, error) {
	var f ClientFrame
	if len(b) > MaxFrameBytes {
		return f, &FrameError{Code: "too_large", Message: fmt.Sprintf("frame is %d bytes; the limit is %d", len(b), MaxFrameBytes)}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return ClientFrame{}, &FrameError{Code: "bad_frame", Message: "frame is not a valid JSON object of the protocol: " + err.Error()}
	}
	if dec.More() {
		return ClientFrame{}, &FrameError{Code: "bad_frame", Message: "one JSON object per frame"}
	}
	bad := func(msg string) error { return &FrameError{Code: "bad_frame", ID: safeID(f.ID), Message: msg} }
	if !clientIDRe.MatchString(f.ID) {
		return f, &FrameError{Code: "bad_frame", Message: "id must be 1-64 characters of A-Z a-z 0-9 _ -"}
	}
	switch f.Type {
	case "message":
		if f.CardID != "" || f.Choice != "" {
			return f, bad("a message frame has no card_id or choice")
		}
		if !utf8.ValidString(f.Text) {
			return f, bad("text is not valid UTF-8")
		}
		n := utf8.RuneCountInString(f.Text)
		if n == 0 {
			return f, bad("text is empty")
		}
		if n > MaxTextChars {
			return f, &FrameError{Code: "too_large", ID: f.ID, Message: fmt.Sprintf("message is %d characters; the limit is %d", n, MaxTextChars)}
		}
	case "tap":
		if f.Text != "" {
			return f, bad("a tap frame has no text")
		}
		if f.CardID == "" || len(f.CardID) > 64 || !clientIDRe.MatchString(f.CardID) {
			return f, bad("card_id is missing or malformed")
		}
		if f.Choice == "" || len(f.Choice) > cards.MaxChoiceID || !clientIDRe.MatchString(f.Choice) {
			return f, bad("choice is missing or malformed")
		}
	case "":
		return f, bad("type is required")
	default:
		return f, &FrameError{Code: "unknown_type", ID: f.ID, Message: fmt.Sprintf("unknown frame type %q", f.Type)}
	}
	return f, nil
}

func safeID(id string) string {
	if clientIDRe.MatchString(id) {
		return id
	}
	return ""
}

// Server frames.
type helloFrame struct {
	Type         string `json:"type"`
	Identity     string `json:"identity"`
	Conversation string `json:"conversation"`
}

type ackFrame struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate"`
}

type messageFrame struct {
	Type      string      `json:"type"`
	MessageID string      `json:"message_id"`
	Text      string      `json:"text,omitempty"`
	Card      *cards.Card `json:"card,omitempty"`
	At        string      `json:"at,omitempty"`
	Replay    bool        `json:"replay,omitempty"`
}

type errorFrame struct {
	Type    string `json:"type"`
	ID      string `json:"id,omitempty"`
	Code    string `json:"code"`
	Message string `json:"message"`
}
