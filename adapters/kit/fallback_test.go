package kit

import (
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

const cardID = "abcdefghijklmnopqrstuvwxyz" // the shape of core.NewID

func TestParseTextTap(t *testing.T) {
	q := &Quoted{Card: cardID, Choices: []string{"approve", "decline"}}
	access := &Quoted{Card: cards.ID("k" + cardID[1:]), Choices: []string{"allow", "deny"}}
	tests := []struct {
		name   string
		text   string
		quoted *Quoted
		want   *core.Tap
	}{
		{"approve", "approve " + cardID, nil, &core.Tap{Card: cardID, Choice: "approve"}},
		{"decline", "decline " + cardID, nil, &core.Tap{Card: cardID, Choice: "decline"}},
		{"confirm", "confirm " + cardID, nil, &core.Tap{Card: cardID, Choice: "confirm"}},
		{"capitalised by the phone", "Approve " + strings.ToUpper(cardID), nil, &core.Tap{Card: cardID, Choice: "approve"}},
		{"copied with quotes", `  "approve ` + cardID + `"  `, nil, &core.Tap{Card: cardID, Choice: "approve"}},
		{"curly quotes", "“decline " + cardID + "”", nil, &core.Tap{Card: cardID, Choice: "decline"}},
		{"explicit id wins over the quote", "decline " + cardID, access, &core.Tap{Card: cardID, Choice: "decline"}},
		{"1 quoting a card", "1", q, &core.Tap{Card: cardID, Choice: "approve"}},
		{"2. quoting a card", "2.", q, &core.Tap{Card: cardID, Choice: "decline"}},
		{"word quoting a card", "Deny", access, &core.Tap{Card: access.Card, Choice: "deny"}},
		{"card's own choice with its id", "allow " + string(access.Card), access, &core.Tap{Card: access.Card, Choice: "allow"}},
		{"1 without a quote", "1", nil, nil},
		{"3 of two choices", "3", q, nil},
		{"0", "0", q, nil},
		{"leading zero", "01", q, nil},
		{"negative", "-1", q, nil},
		{"choice alone without a quote", "approve", nil, nil},
		{"unknown verb", "delete " + cardID, nil, nil},
		{"a sentence", "approve everything please", nil, nil},
		{"short id", "approve abc", nil, nil},
		{"id with bad characters", "approve abcdefghijklmnopqrstuvwxy1", nil, nil},
		{"three words", "approve " + cardID + " now", nil, nil},
		{"empty", "   ", q, nil},
		{"choice of another card's vocabulary", "allow", q, nil},
		{"too long", "approve " + cardID + strings.Repeat(" ", 200), nil, nil},
		{"quoted card with an unusable choice", "1", &Quoted{Card: cardID, Choices: []string{strings.Repeat("x", 17)}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseTextTap(tt.text, tt.quoted)
			if tt.want == nil {
				if ok {
					t.Fatalf("ParseTextTap(%q) = %+v; want no tap", tt.text, got)
				}
				return
			}
			if !ok || got != *tt.want {
				t.Fatalf("ParseTextTap(%q) = %+v, %v; want %+v", tt.text, got, ok, *tt.want)
			}
		})
	}
}

// Every choice PlainText offers, typed back as shown or by its number
// quoting the card, gives the tap its button would have sent.
func TestPlainTextRoundTrip(t *testing.T) {
	for _, c := range []*cards.Card{
		{ID: cardID, Kind: cards.KindApproval, Intent: "Run uname", Risk: cards.RiskLow, Rationale: "r", Status: cards.StatusPending,
			Choices: []cards.Choice{{ID: "approve", Label: "Run `uname`"}, {ID: "decline", Label: "Decline"}}},
		{ID: cardID, Kind: cards.KindApproval, Intent: "Run rm", Risk: cards.RiskHigh, Rationale: "r", Status: cards.StatusConfirming,
			Choices: []cards.Choice{{ID: "confirm", Label: "Confirm"}, {ID: "decline", Label: "Decline"}}},
		{ID: cardID, Kind: cards.KindInfo, Intent: "Allow Sam?", Status: cards.StatusPending,
			Choices: []cards.Choice{{ID: "allow", Label: "Allow"}, {ID: "deny", Label: "Deny"}}},
	} {
		text := c.PlainText()
		for i, ch := range c.Choices {
			want := core.Tap{Card: c.ID, Choice: ch.ID}
			reply := ch.ID + " " + string(c.ID)
			if !strings.Contains(text, `"`+reply+`"`) {
				t.Fatalf("PlainText does not offer %q:\n%s", reply, text)
			}
			if got, ok := ParseTextTap(reply, QuotedCard(c)); !ok || got != want {
				t.Fatalf("%q → %+v %v; want %+v", reply, got, ok, want)
			}
			n := string(rune('1' + i))
			if !strings.Contains(text, n+". "+ch.Label) {
				t.Fatalf("PlainText does not number %q as %s:\n%s", ch.Label, n, text)
			}
			if got, ok := ParseTextTap(n, QuotedCard(c)); !ok || got != want {
				t.Fatalf("%q quoting the card → %+v %v; want %+v", n, got, ok, want)
			}
		}
	}
	closed := &cards.Card{ID: cardID, Kind: cards.KindApproval, Status: cards.StatusDeclined,
		Choices: []cards.Choice{{ID: "approve", Label: "Run"}}}
	if QuotedCard(closed) != nil {
		t.Fatal("a closed card offers choices")
	}
}

// FuzzParseTextTap: any text, with or without a quoted card, either stays
// text or becomes a tap that passes the core's validation of a turn, names
// a card id of the core's shape or the quoted card, and a choice the card
// or the text vocabulary has.
func FuzzParseTextTap(f *testing.F) {
	for _, s := range []string{"approve " + cardID, "1", "2.", "Deny", `"decline ` + cardID + `"`, "approve", "hello world", "“confirm " + cardID + "”"} {
		f.Add(s, cardID, "approve", "decline")
	}
	f.Add("1", "", "", "")
	f.Add("x", "c", "x", "y y")
	f.Fuzz(func(t *testing.T, text, card, c1, c2 string) {
		var q *Quoted
		if card != "" {
			q = &Quoted{Card: cards.ID(card), Choices: []string{c1, c2}}
		}
		tap, ok := ParseTextTap(text, q)
		if !ok {
			if tap != (core.Tap{}) {
				t.Fatalf("no tap but %+v", tap)
			}
			return
		}
		turn := core.Turn{Channel: "x", Conversation: "x:1", Sender: "x:1", EventID: "e", Tap: &tap,
			Evidence: core.Evidence{Authenticated: true}, At: time.Unix(0, 0)}
		if err := turn.Validate(); err != nil {
			t.Fatalf("%q → %+v, which the core refuses: %v", text, tap, err)
		}
		fromQuote := q != nil && tap.Card == q.Card && (tap.Choice == c1 || tap.Choice == c2)
		fromText := isCoreID(string(tap.Card)) && strings.Contains(strings.ToLower(text), string(tap.Card))
		if !fromQuote && !fromText {
			t.Fatalf("%q → %+v: neither the quoted card nor an id in the text", text, tap)
		}
		if !fromQuote {
			if _, known := findChoice(tap.Choice, TextChoices); !known {
				t.Fatalf("%q → choice %q outside the vocabulary", text, tap.Choice)
			}
		}
	})
}
