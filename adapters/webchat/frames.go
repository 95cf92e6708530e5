package webchat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/internal/lazyre"
)

// Limits of the protocol (docs/webchat-protocol.md).
const (
	MaxFrameBytes = 64 << 10
	MaxTextChars  = 16000
)

var clientIDRe = lazyre.New(`^[A-Za-z0-9_-]{1,64}$`)

// ClientFrame is a frame from the browser.
type ClientFrame struct {
	Type   string `json:"type"`
	ID     string `json:"id"`
	Text   string `json:"text,omitempty"`
	CardID string `json:"card_id,omitempty"`
	Choice string `json:"choice,omitempty"`
	// ReplyTo (optional, message frames only) is the message_id of the
	// bot's message the person replies to: a flow's gate or progress card
	// takes the reply as its answer (core.Turn.ReplyTo).
	ReplyTo string `json:"reply_to,omitempty"`
}

// replyToRe is the shape of a reply_to: a message_id as the server sends
// them ("b-<key>", "m-<id>").
var replyToRe = lazyre.New(`^[A-Za-z0-9_.:-]{1,200}$`)

// FrameError is a protocol error with the code sent back to the client.
type FrameError struct {
	Code    string
	ID      string
	Message string
}

func (e *FrameError) Error() string { return e.Code + ": " + e.Message }

// idOf is the frame's id when the frame is a JSON object with a valid id but
// fails the strict decoding (an unknown field, a wrong type elsewhere): the
// error answer still echoes it, as the protocol promises.
func idOf(b []byte) string {
	var probe struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(b, &probe) != nil || !clientIDRe.MatchString(probe.ID) {
		return ""
	}
	return probe.ID
}

// ParseFrame decodes and validates one client frame. Every way it can fail
// yields a *FrameError with a code from the protocol.
func ParseFrame(b []byte) (ClientFrame, error) {
	var f ClientFrame
	if len(b) > MaxFrameBytes {
		return f, &FrameError{Code: "too_large", Message: fmt.Sprintf("frame is %d bytes; the limit is %d", len(b), MaxFrameBytes)}
	}
	if !utf8.Valid(b) {
		// encoding/json would quietly turn invalid bytes into U+FFFD; the
		// sender gets a clear answer instead.
		return f, &FrameError{Code: "bad_text", Message: "frame is not valid UTF-8"}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return ClientFrame{}, &FrameError{Code: "bad_frame", ID: idOf(b), Message: "frame is not a valid JSON object of the protocol: " + err.Error()}
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
		if f.ReplyTo != "" && !replyToRe.MatchString(f.ReplyTo) {
			return f, bad("reply_to must be a message_id: 1-200 characters of A-Z a-z 0-9 _ - . :")
		}
		if !utf8.ValidString(f.Text) {
			return f, &FrameError{Code: "bad_text", ID: f.ID, Message: "text is not valid UTF-8"}
		}
		if strings.IndexByte(f.Text, 0) >= 0 {
			// PostgreSQL cannot store it; refused here with a clear answer
			// rather than failing later as "could not store".
			return f, &FrameError{Code: "bad_text", ID: f.ID, Message: "text contains the NUL character (U+0000), which cannot be stored"}
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
		if f.ReplyTo != "" {
			return f, bad("only a message frame has reply_to")
		}
		if f.CardID == "" || len(f.CardID) > 64 || !clientIDRe.MatchString(f.CardID) {
			return f, bad("card_id is missing or malformed")
		}
		if f.Choice == "" || len(f.Choice) > cards.MaxChoiceID || !clientIDRe.MatchString(f.Choice) {
			return f, bad("choice is missing or malformed")
		}
	case "get_card":
		if f.Text != "" || f.Choice != "" || f.ReplyTo != "" {
			return f, bad("a get_card frame has only id and card_id")
		}
		if f.CardID == "" || !clientIDRe.MatchString(f.CardID) {
			return f, bad("card_id is missing or malformed")
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

// messageFrame is a message or update (and, with ID set, a card_state
// answer). From is "bot" or "user"; ClientID is the id of the client frame
// a user message came from.
type messageFrame struct {
	Type      string      `json:"type"`
	ID        string      `json:"id,omitempty"`
	MessageID string      `json:"message_id"`
	From      string      `json:"from,omitempty"`
	ClientID  string      `json:"client_id,omitempty"`
	Text      string      `json:"text,omitempty"`
	Card      *cards.Card `json:"card,omitempty"`
	At        string      `json:"at,omitempty"`
	Replay    bool        `json:"replay,omitempty"`
}

const (
	fromBot  = "bot"
	fromUser = "user"
)

// tapResultFrame answers a processed tap (protocol §3.4).
type tapResultFrame struct {
	Type    string `json:"type"`
	ID      string `json:"id,omitempty"`
	CardID  string `json:"card_id"`
	Refused bool   `json:"refused"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

type errorFrame struct {
	Type    string `json:"type"`
	ID      string `json:"id,omitempty"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// truncMark ends a field the server shortened to keep a frame in bounds.
const truncMark = "\n… (truncated)"

// encodeMessageFrame marshals a message or update frame so that it fits in
// MaxFrameBytes (protocol §3: server frames stay under the limit too). When
// it would not, the card's inline output is cut first (output_ref, if any,
// still leads to the whole of it), then the message text, then the card's
// details, then its affected items. A card whose command alone is too large
// to show is sent without its choices and with a clipped command, so nobody
// is asked to approve something they cannot see in full. f is not modified.
func encodeMessageFrame(f messageFrame) ([]byte, error) {
	b, err := json.Marshal(f)
	if err != nil || len(b) <= MaxFrameBytes {
		return b, err
	}
	if f.Card != nil {
		c := *f.Card
		f.Card = &c
	}
	fields := []*string{&f.Text}
	if f.Card != nil {
		fields = []*string{&f.Card.Output, &f.Text, &f.Card.Details}
	}
	for _, p := range fields {
		if b, ok := fitField(&f, p); ok {
			return b, nil
		}
	}
	if f.Card != nil {
		c := f.Card
		c.AffectedItems = nil
		if b, err = json.Marshal(f); err != nil || len(b) <= MaxFrameBytes {
			return b, err
		}
		c.Choices, c.Link = nil, nil
		c.Outcome = "Too large to show in the web chat."
		if len(c.Rationale) > 1024 {
			c.Rationale = cutAt(c.Rationale, 1024)
		}
		if b, ok := fitField(&f, &c.Command); ok {
			return b, nil
		}
	}
	return nil, fmt.Errorf("webchat: frame for message %s does not fit in %d bytes", f.MessageID, MaxFrameBytes)
}

// fitField shortens the string at p (a field of f) as little as possible
// for f to fit in MaxFrameBytes, and returns the encoding. When even an
// emptied field is not enough, it leaves the field cut to the mark and
// reports false.
func fitField(f *messageFrame, p *string) ([]byte, bool) {
	orig := *p
	if orig == "" {
		return nil, false
	}
	fits := func(keep int) ([]byte, bool) {
		*p = cutAt(orig, keep)
		b, err := json.Marshal(f)
		return b, err == nil && len(b) <= MaxFrameBytes
	}
	if _, ok := fits(0); !ok {
		return nil, false
	}
	// Largest keep that fits: keep=lo fits, keep=hi does not.
	lo, hi := 0, len(orig)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if _, ok := fits(mid); ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	b, _ := fits(lo)
	return b, true
}

// cutAt keeps at most keep bytes of s, cut at a rune boundary, and marks
// the cut.
func cutAt(s string, keep int) string {
	keep = min(max(keep, 0), len(s))
	for keep > 0 && keep < len(s) && !utf8.RuneStart(s[keep]) {
		keep--
	}
	if keep == 0 {
		return strings.TrimPrefix(truncMark, "\n")
	}
	return s[:keep] + truncMark
}
