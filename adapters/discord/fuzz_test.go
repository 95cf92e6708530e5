package discord

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

const fuzzMe = "1100000000000000002"

func allowAll(string, string) bool { return true }

// FuzzMessageToTurn: any message payload converts without panicking, and
// every delivered turn passes the core's shape check, names the author as
// sender and never comes from a bot.
func FuzzMessageToTurn(f *testing.F) {
	for _, s := range []string{
		`{"id":"1201","channel_id":"1301","author":{"id":"1401","username":"o"},"content":"run uname -a","type":0}`,
		`{"id":"1201","channel_id":"1301","author":{"id":"1401"},"content":"<@1100000000000000002> run ls","mentions":[{"id":"1100000000000000002"}]}`,
		`{"id":"1201","channel_id":"1301","author":{"id":"1401","bot":true},"content":"/run x"}`,
		`{"id":"x","channel_id":"","author":null}`,
		`{"id":"1201","channel_id":"1301","author":{"id":"1401"},"content":"hi","referenced_message":{"id":"1","author":{"id":"1100000000000000002"}},"type":19}`,
	} {
		f.Add([]byte(s), "")
		f.Add([]byte(s), "1501")
	}
	f.Fuzz(func(t *testing.T, raw []byte, guild string) {
		var m discordgo.Message
		if json.Unmarshal(raw, &m) != nil {
			return
		}
		in := messageToTurn(&m, where{guild: guild, allowed: true}, fuzzMe, "discord", MethodGateway)
		if in.act != actDeliver {
			return
		}
		if err := in.turn.Validate(); err != nil {
			t.Fatalf("delivered turn fails Validate: %v (%+v)", err, in.turn)
		}
		if m.Author == nil || m.Author.Bot || in.turn.Sender != identity(m.Author.ID) {
			t.Fatalf("sender %q for author %+v", in.turn.Sender, m.Author)
		}
		if guild != "" && in.turn.ChatKind != core.ChatGroup {
			t.Fatalf("guild message with chat kind %q", in.turn.ChatKind)
		}
	})
}

// FuzzInteractionToTurn: any interaction payload converts without
// panicking; a delivered tap carries only a valid card id and choice.
func FuzzInteractionToTurn(f *testing.F) {
	for _, s := range []string{
		`{"id":"1201","application_id":"1","type":2,"token":"t","channel_id":"1301","user":{"id":"1401"},"data":{"id":"1","name":"run","type":1,"options":[{"name":"command","type":3,"value":"uname -a"}]}}`,
		`{"id":"1201","type":3,"token":"t","channel_id":"1301","guild_id":"1501","member":{"user":{"id":"1401"}},"data":{"custom_id":"c:abc:approve","component_type":2}}`,
		`{"id":"1201","type":3,"token":"t","channel_id":"1301","user":{"id":"1401"},"data":{"custom_id":"c:a:b:c"}}`,
		`{"id":"1201","type":2,"token":"t","channel_id":"1301","user":{"id":"1401"},"data":{"name":"audit","options":[{"name":"n","type":4,"value":5}]}}`,
		`{"type":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var ix discordgo.Interaction
		if json.Unmarshal(raw, &ix) != nil {
			return
		}
		in := interactionToTurn(&ix, allowAll, "discord", MethodGateway)
		if in.act != actDeliver {
			return
		}
		if err := in.turn.Validate(); err != nil {
			t.Fatalf("delivered turn fails Validate: %v", err)
		}
		if tp := in.turn.Tap; tp != nil {
			id, err := customID(tp.Card, tp.Choice)
			if err != nil || len(id) > MaxCustomID {
				t.Fatalf("tap %+v does not round-trip: %v", tp, err)
			}
		} else if !strings.HasPrefix(in.turn.Text, "/") {
			t.Fatalf("command text %q", in.turn.Text)
		}
	})
}

// FuzzRenderCard: any valid card renders within Discord's limits, its user
// text cannot escape the code block or mention anyone, and every custom_id
// parses back.
func FuzzRenderCard(f *testing.F) {
	f.Add("Run x", "uname -a", "```@everyone``` <@123>", "out", 2)
	f.Add(strings.Repeat("i", 300), strings.Repeat("c", 5000), strings.Repeat("r", 5000), strings.Repeat("o", 9000), 1)
	f.Fuzz(func(t *testing.T, intent, command, rationale, output string, n int) {
		c := &cards.Card{ID: "dqkc53c53bi4vzkowpdi4w34xm", Kind: cards.KindApproval, Intent: intent, Risk: cards.RiskLow,
			Command: command, Rationale: rationale, Output: output, Status: cards.StatusPending,
			Choices: []cards.Choice{{ID: "approve", Label: "Run", Style: cards.StylePrimary}, {ID: "decline", Label: "Decline", Style: cards.StyleDanger}}}
		if n%2 == 0 {
			c.Status, c.Outcome = cards.StatusDone, "exit code 0 ✓"
		}
		if c.Validate() != nil {
			return
		}
		r, err := renderCard(c)
		if err != nil {
			return
		}
		if len(r.embeds) != 1 {
			t.Fatalf("%d embeds", len(r.embeds))
		}
		e := r.embeds[0]
		if utf8.RuneCountInString(e.Description) > MaxEmbedDesc || utf8.RuneCountInString(e.Title) > MaxEmbedTitle ||
			utf8.RuneCountInString(e.Description)+utf8.RuneCountInString(e.Title) > MaxEmbedTotal {
			t.Fatalf("embed over the limits: title %d, description %d", utf8.RuneCountInString(e.Title), utf8.RuneCountInString(e.Description))
		}
		// Every fence is ours: user text cannot close a code block.
		if strings.Count(e.Description, "```")%2 != 0 {
			t.Fatalf("unbalanced code fences in %q", e.Description)
		}
		for _, row := range r.components {
			for _, b := range row.(discordgo.ActionsRow).Components {
				btn := b.(discordgo.Button)
				if btn.Style == discordgo.LinkButton {
					continue
				}
				if _, _, ok := parseCustomID(btn.CustomID); !ok || len(btn.CustomID) > MaxCustomID {
					t.Fatalf("custom_id %q", btn.CustomID)
				}
			}
		}
	})
}
