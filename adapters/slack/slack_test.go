package slack

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/silas-gateway/silas/adapters/slack/slacktest"
	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

const (
	botTok = "xoxb-1234-5678-abcdefgh"
	appTok = "xapp-1-A01-1234-abcdefgh"
	sigSec = "0123456789abcdef0123456789abcdef"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "bot")
	if err := os.WriteFile(tokFile, []byte(botTok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		key  string // "" = valid
	}{
		{"socket defaults", Config{BotToken: botTok, AppToken: appTok}, ""},
		{"bot token from a file", Config{BotToken: "file:" + tokFile, AppToken: appTok}, ""},
		{"http mode", Config{Mode: ModeHTTP, BotToken: botTok, SigningSecret: sigSec}, ""},
		{"plain http base url for tests", Config{BotToken: botTok, AppToken: appTok, BaseURL: "http://127.0.0.1:1/api"}, ""},
		{"no bot token", Config{AppToken: appTok}, "slack.bot_token"},
		{"app token as bot token", Config{BotToken: appTok, AppToken: appTok}, "slack.bot_token"},
		{"missing token file", Config{BotToken: "file:" + filepath.Join(dir, "nope"), AppToken: appTok}, "slack.bot_token"},
		{"socket without app token", Config{BotToken: botTok}, "slack.app_token"},
		{"bot token as app token", Config{BotToken: botTok, AppToken: botTok}, "slack.app_token"},
		{"http without signing secret", Config{Mode: ModeHTTP, BotToken: botTok}, "slack.signing_secret"},
		{"short signing secret", Config{Mode: ModeHTTP, BotToken: botTok, SigningSecret: "abc"}, "slack.signing_secret"},
		{"unknown mode", Config{Mode: "webhook", BotToken: botTok, AppToken: appTok}, "slack.mode"},
		{"bad base url", Config{BotToken: botTok, AppToken: appTok, BaseURL: "ftp://x"}, "slack.base_url"},
		{"bad team", Config{BotToken: botTok, AppToken: appTok, TeamID: "x"}, "slack.team_id"},
		{"ping interval", Config{BotToken: botTok, AppToken: appTok, PingInterval: time.Hour}, "slack.ping_interval"},
		{"ping timeout", Config{BotToken: botTok, AppToken: appTok, PingTimeout: time.Millisecond}, "slack.ping_timeout"},
		{"silence window at most 60s", Config{BotToken: botTok, AppToken: appTok, PingInterval: 30 * time.Second, PingTimeout: 30 * time.Second}, ""},
		{"silence window over 60s (half-open not replaced within 75s)", Config{BotToken: botTok, AppToken: appTok, PingInterval: 40 * time.Second}, "slack.ping_timeout"},
		{"per channel", Config{BotToken: botTok, AppToken: appTok, Limits: Limits{PerChannelInterval: time.Hour}}, "slack.limits.per_channel_interval"},
		{"global", Config{BotToken: botTok, AppToken: appTok, Limits: Limits{GlobalPerSecond: -1}}, "slack.limits.global_per_second"},
		{"update tier", Config{BotToken: botTok, AppToken: appTok, Limits: Limits{UpdatePerMinute: -1}}, "slack.limits.update_per_minute"},
		{"ephemeral tier", Config{BotToken: botTok, AppToken: appTok, Limits: Limits{EphemeralPerMinute: -1}}, "slack.limits.ephemeral_per_minute"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			switch {
			case tc.key == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.key != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.key+":")):
				t.Fatalf("error %v; want one naming %s", err, tc.key)
			}
			if err != nil && (strings.Contains(err.Error(), botTok) || strings.Contains(err.Error(), appTok)) {
				t.Fatalf("error shows a token: %v", err)
			}
		})
	}
}

var me = botInfo{userID: "U0BOT", botID: "B0BOT", teamID: "T0TEAM"}

func ev(e map[string]any) *eventsPayload {
	b, _ := json.Marshal(map[string]any{"type": "event_callback", "team_id": "T0TEAM", "event_id": "Ev1", "event": e})
	p, _ := decodeEvents(b)
	return p
}

func TestEventToTurn(t *testing.T) {
	t.Parallel()
	known := func(c, ts string) bool { return c == "C1" && ts == "1.000009" }
	tests := []struct {
		name string
		p    *eventsPayload
		act  action
		conv string
		text string
		kind string
		evID string
	}{
		{"dm", ev(map[string]any{"type": "message", "user": "U1", "text": "run uname -a", "ts": "1.000001", "channel": "D1", "channel_type": "im"}),
			actDeliver, "slack:U1", "/run uname -a", core.ChatDirect, "m:D1:1.000001"},
		{"dm slash form", ev(map[string]any{"type": "message", "user": "U1", "text": "/whoami", "ts": "1.000001", "channel": "D1", "channel_type": "im"}),
			actDeliver, "slack:U1", "/whoami", core.ChatDirect, "m:D1:1.000001"},
		{"mention as message", ev(map[string]any{"type": "message", "user": "U1", "text": "<@U0BOT> run ls", "ts": "1.000002", "channel": "C1", "channel_type": "channel"}),
			actDeliver, "slack:C1:1.000002", "/run ls", core.ChatGroup, "m:C1:1.000002"},
		{"same mention as app_mention: same event id", ev(map[string]any{"type": "app_mention", "user": "U1", "text": "<@U0BOT> run ls", "ts": "1.000002", "channel": "C1"}),
			actDeliver, "slack:C1:1.000002", "/run ls", core.ChatGroup, "m:C1:1.000002"},
		{"mention in a thread stays in it", ev(map[string]any{"type": "app_mention", "user": "U1", "text": "hi <@U0BOT>", "ts": "1.000003", "thread_ts": "1.000001", "channel": "C1"}),
			actDeliver, "slack:C1:1.000001", "hi", core.ChatGroup, "m:C1:1.000003"},
		{"reply in a thread the bot took part in", ev(map[string]any{"type": "message", "user": "U1", "text": "whoami", "ts": "1.000010", "thread_ts": "1.000009", "channel": "C1", "channel_type": "channel"}),
			actDeliver, "slack:C1:1.000009", "/whoami", core.ChatGroup, "m:C1:1.000010"},
		{"reply under the bot's message", ev(map[string]any{"type": "message", "user": "U1", "text": "x", "ts": "1.000011", "thread_ts": "1.000005", "parent_user_id": "U0BOT", "channel": "C2", "channel_type": "channel"}),
			actDeliver, "slack:C2:1.000005", "x", core.ChatGroup, "m:C2:1.000011"},
		{"channel chatter", ev(map[string]any{"type": "message", "user": "U1", "text": "run ls", "ts": "1.000004", "channel": "C1", "channel_type": "channel"}), actIgnore, "", "", "", ""},
		{"bot's own post", ev(map[string]any{"type": "message", "user": "U0BOT", "bot_id": "B0BOT", "text": "hi", "ts": "1.000004", "channel": "D1"}), actIgnore, "", "", "", ""},
		{"another bot", ev(map[string]any{"type": "message", "user": "U9", "bot_id": "B9", "text": "run ls", "ts": "1.000004", "channel": "D1"}), actIgnore, "", "", "", ""},
		{"edit", ev(map[string]any{"type": "message", "subtype": "message_changed", "text": "run ls", "ts": "1.000004", "channel": "D1"}), actIgnore, "", "", "", ""},
		{"malformed ts", ev(map[string]any{"type": "message", "user": "U1", "text": "hi", "ts": "x", "channel": "D1"}), actMalformed, "", "", "", ""},
		{"mention only", ev(map[string]any{"type": "app_mention", "user": "U1", "text": "<@U0BOT>", "ts": "1.000004", "channel": "C1"}), actIgnore, "", "", "", ""},
		{"escaped text", ev(map[string]any{"type": "message", "user": "U1", "text": "run echo &lt;b&gt; &amp; <http://x.y|x.y>", "ts": "1.000001", "channel": "D1", "channel_type": "im"}),
			actDeliver, "slack:U1", "/run echo <b> & http://x.y", core.ChatDirect, "m:D1:1.000001"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := eventToTurn(tc.p, me, "slack", MethodSocket, known)
			if r.act != tc.act {
				t.Fatalf("act = %s (%s); want %s", r.act, r.reason, tc.act)
			}
			if tc.act != actDeliver {
				return
			}
			if err := r.turn.Validate(); err != nil {
				t.Fatal(err)
			}
			got := r.turn
			if string(got.Conversation) != tc.conv || got.Text != tc.text || got.ChatKind != tc.kind || got.EventID != tc.evID || got.Sender != "slack:U1" {
				t.Fatalf("turn = %+v", got)
			}
		})
	}
	foreign := ev(map[string]any{"type": "message", "user": "U1", "text": "hi", "ts": "1.000001", "channel": "D1"})
	foreign.TeamID = "T0OTHER"
	if r := eventToTurn(foreign, me, "slack", MethodSocket, nil); r.act != actForeign {
		t.Fatalf("another workspace: %s", r.act)
	}
}

func TestInteractionAndCommand(t *testing.T) {
	t.Parallel()
	raw := `{"type":"block_actions","team":{"id":"T0TEAM"},"user":{"id":"U1","name":"olive"},"channel":{"id":"C1"},
		"container":{"message_ts":"1.000005","thread_ts":"1.000001","channel_id":"C1"},"trigger_id":"t.1","response_url":"https://hooks.slack.com/x",
		"actions":[{"action_id":"c:abc:approve","block_id":"choices","value":"c:abc:approve","type":"button"}]}`
	ic, err := decodeInteraction([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	r := interactionToTurn(ic, me, "slack", MethodSocket)
	if r.act != actDeliver || r.turn.Tap == nil || r.turn.Tap.Card != "abc" || r.turn.Tap.Choice != "approve" ||
		r.turn.Conversation != "slack:C1:1.000001" || r.turn.EventID != "a:t.1" || r.tap.messageTS != "1.000005" {
		t.Fatalf("tap = %+v %+v (%s)", r.turn, r.tap, r.reason)
	}
	// Without block_id slack-go files the action elsewhere; still read.
	ic2, _ := decodeInteraction([]byte(strings.Replace(raw, `"block_id":"choices",`, "", 1)))
	if r := interactionToTurn(ic2, me, "slack", MethodSocket); r.act != actDeliver || r.turn.Tap.Choice != "approve" {
		t.Fatalf("tap without block_id: %s %s", r.act, r.reason)
	}
	ic.ActionCallback.BlockActions[0].Value = "rm -rf /"
	if r := interactionToTurn(ic, me, "slack", MethodSocket); r.act != actUnknownButton {
		t.Fatalf("foreign value: %s", r.act)
	}
	ic.Team.ID = "T0OTHER"
	if r := interactionToTurn(ic, me, "slack", MethodSocket); r.act != actForeign {
		t.Fatalf("foreign team: %s", r.act)
	}
	c := commandFromForm(url.Values{"team_id": {"T0TEAM"}, "channel_id": {"C1"}, "user_id": {"U1"}, "command": {"/silas"}, "text": {"run uname -a"}, "trigger_id": {"t.2"}})
	r = commandToTurn(c, me, "slack", MethodSignature)
	if r.act != actDeliver || r.turn.Text != "/run uname -a" || r.turn.Conversation != "slack:C1" || r.turn.EventID != "c:t.2" {
		t.Fatalf("command = %+v", r.turn)
	}
}

// cardFor builds a valid approval card of the fuzzed fields.
func cardFor(intent, rationale, command, output, details, label string, risk int) *cards.Card {
	risks := []cards.Risk{cards.RiskLow, cards.RiskMedium, cards.RiskHigh, cards.RiskIrreversible}
	if strings.TrimSpace(intent) == "" {
		intent = "x"
	}
	if strings.TrimSpace(rationale) == "" {
		rationale = "y"
	}
	if strings.TrimSpace(label) == "" {
		label = "Run"
	}
	intent, rationale, label = clipPlain(intent, cards.MaxIntent), clipPlain(rationale, cards.MaxRationale), clipPlain(label, cards.MaxLabel)
	return &cards.Card{ID: "abcdefghijklmnopqrstuvwxyz", Kind: cards.KindApproval, Intent: intent, Risk: risks[(risk%4+4)%4],
		Rationale: rationale, Command: command, Output: output, Details: details, AffectedItems: []string{details, output},
		Status: cards.StatusPending, Outcome: output, OutputRef: "ref-1",
		Choices: []cards.Choice{{ID: "approve", Label: label}, {ID: "decline", Label: "Decline", Style: cards.StyleDanger}}}
}

// limitsOf renders c and holds the message to Slack's limits.
func limitsOf(t *testing.T, c *cards.Card) rendered {
	t.Helper()
	r, err := renderCard(c)
	if err != nil {
		if c.Validate() == nil {
			t.Fatalf("valid card not rendered: %v", err)
		}
		return r
	}
	b, err := json.Marshal(r.blocks)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []map[string]any
	if err := json.Unmarshal(b, &blocks); err != nil {
		t.Fatal(err)
	}
	if v := slacktest.CheckLimits(r.text, blocks); v != "" {
		t.Fatalf("rendered card breaks Slack's limits: %s", v)
	}
	return r
}

func TestRenderCardEscapesAndFits(t *testing.T) {
	t.Parallel()
	c := cardFor("Ping <!channel>", "Because <@U123> & <https://evil|click>", "echo '<!here>' ```x```", strings.Repeat("long line\n", 2000), "d", "Run it", 2)
	r := limitsOf(t, c)
	b, _ := json.Marshal(r.blocks)
	s := string(b)
	// (json.Marshal writes < as \u003c: the blocks are checked field by
	// field in TestRenderCardEscapesEveryUserField.)
	for _, bad := range []string{"<!channel>", "<@U123>", "<https://evil", "<!here>"} {
		if strings.Contains(r.text, bad) {
			t.Errorf("the notification text contains %q unescaped", bad)
		}
	}
	if !strings.Contains(s, truncMark) {
		t.Error("long output not shortened")
	}
	if !strings.Contains(s, `"confirm"`) || !strings.Contains(s, `"style":"danger"`) || !strings.Contains(s, `"style":"primary"`) {
		t.Errorf("high-risk card without confirm dialog or button styles: %s", s)
	}
	// A command too long to show cannot be approved from Slack.
	long := cardFor("x", "y", strings.Repeat("a", 5000), "", "", "Run", 0)
	if r := limitsOf(t, long); strings.Contains(mustJSON(r.blocks), `"actions"`) {
		t.Error("a clipped command still has buttons")
	}
	// Decided: no buttons.
	c.Status = cards.StatusDone
	if r := limitsOf(t, c); strings.Contains(mustJSON(r.blocks), `"actions"`) {
		t.Error("a decided card still has buttons")
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func FuzzRenderCard(f *testing.F) {
	f.Add("Run `uname -a`", "because", "uname -a", "Linux\n", "details", "Run `uname -a`", 0)
	f.Add("<!channel>", "&&&<<<>>>", "```", strings.Repeat("&", 4000), strings.Repeat("é\n", 3000), "<@U1>", 3)
	f.Fuzz(func(t *testing.T, intent, rationale, command, output, details, label string, risk int) {
		limitsOf(t, cardFor(intent, rationale, command, output, details, label, risk))
	})
}

// FuzzPayloads feeds arbitrary bytes to every inbound parser: none panics,
// and every turn they deliver passes the core's shape check.
func FuzzPayloads(f *testing.F) {
	f.Add([]byte(`{"type":"event_callback","team_id":"T0TEAM","event":{"type":"app_mention","user":"U1","text":"<@U0BOT> run ls","ts":"1.000002","channel":"C1"}}`))
	f.Add([]byte(`{"type":"block_actions","team":{"id":"T0TEAM"},"user":{"id":"U1"},"channel":{"id":"D1"},"container":{"message_ts":"1.1"},"trigger_id":"t","actions":[{"value":"c:abc:approve"}]}`))
	f.Add([]byte(`{"team_id":"T0TEAM","channel_id":"C1","user_id":"U1","text":"run x","trigger_id":"t"}`))
	f.Add([]byte("team_id=T0TEAM&channel_id=C1&user_id=U1&text=run+x&trigger_id=t"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		check := func(r inbound) {
			if r.act == actDeliver {
				if err := r.turn.Validate(); err != nil {
					t.Fatalf("delivered turn fails the core's check: %v (%+v)", err, r.turn)
				}
			}
		}
		if p, err := decodeEvents(raw); err == nil {
			check(eventToTurn(p, me, "slack", MethodSocket, func(string, string) bool { return true }))
		}
		if ic, err := decodeInteraction(raw); err == nil {
			check(interactionToTurn(ic, me, "slack", MethodSignature))
		}
		var c command
		if json.Unmarshal(raw, &c) == nil {
			check(commandToTurn(&c, me, "slack", MethodSocket))
		}
		if v, err := url.ParseQuery(string(raw)); err == nil {
			check(commandToTurn(commandFromForm(v), me, "slack", MethodSignature))
		}
		var env envelope
		_ = json.Unmarshal(raw, &env)
		_, _, _ = parseButtonValue(string(raw))
	})
}

func TestMapError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		err       error
		retryable bool
		after     time.Duration
	}{
		{"429", &slack.RateLimitedError{RetryAfter: 3 * time.Second}, false, 3 * time.Second},
		{"channel_not_found", slack.SlackErrorResponse{Err: "channel_not_found"}, false, 0},
		{"not_in_channel", slack.SlackErrorResponse{Err: "not_in_channel"}, false, 0},
		{"is_archived", slack.SlackErrorResponse{Err: "is_archived"}, false, 0},
		{"invalid_auth is retried until fixed", slack.SlackErrorResponse{Err: "invalid_auth"}, true, 0},
		{"5xx", slack.StatusCodeError{Code: 503, Status: "503"}, true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := mapError("chat.postMessage", tc.err)
			var perm *core.PermanentError
			var rl *core.RateLimitedError
			retryable := !asErr(err, &perm) && !asErr(err, &rl)
			if retryable != tc.retryable {
				t.Fatalf("%v: retryable = %v", err, retryable)
			}
			if tc.after > 0 && (rl == nil || rl.RetryAfter != tc.after) {
				t.Fatalf("%v: want rate limited %s", err, tc.after)
			}
		})
	}
}

func asErr[T error](err error, target *T) bool { return errorsAs(err, target) }

// TestRenderCardEscapesEveryUserField: every user-derived field of a card
// that Slack reads as mrkdwn (sections, context lines, the confirm
// dialog's text, the notification text) carries & < > escaped, so nobody
// can mention @channel, a person or a link through a card. plain_text
// objects (header, button labels, dialog title) are not parsed by Slack
// and show the characters as typed.
func TestRenderCardEscapesEveryUserField(t *testing.T) {
	t.Parallel()
	const inj = "<!channel> <@U123> <https://evil|click> & <!subteam^S1>"
	tests := []struct {
		name string
		edit func(c *cards.Card)
	}{
		{"intent", func(c *cards.Card) { c.Intent = "Ping " + inj; c.Risk = cards.RiskHigh }},
		{"rationale", func(c *cards.Card) { c.Rationale = inj }},
		{"command", func(c *cards.Card) { c.Command = "echo '" + inj + "'" }},
		{"affected items", func(c *cards.Card) { c.AffectedItems = []string{inj, "x" + inj} }},
		{"details collapsed", func(c *cards.Card) { c.Details = inj }},
		{"outcome", func(c *cards.Card) { c.Status, c.Outcome, c.Choices = cards.StatusDone, inj, nil }},
		{"output", func(c *cards.Card) { c.Status, c.Output, c.Choices = cards.StatusDone, inj, nil }},
		{"output ref", func(c *cards.Card) { c.Status, c.OutputRef, c.Choices = cards.StatusDone, "out-1"+inj, nil }},
		{"expiry", func(c *cards.Card) { c.ExpiresAt = inj }},
		{"link label, link shown as text", func(c *cards.Card) {
			c.Status, c.Choices, c.Link = cards.StatusDone, nil, &cards.Link{Label: inj, URL: "https://x.test/" + inj}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := cardFor("Run it", "because", "echo hi", "", "", "Run", 0)
			c.AffectedItems, c.Outcome, c.OutputRef = nil, "", ""
			tc.edit(c)
			if err := c.Validate(); err != nil {
				t.Skipf("the core would not make this card: %v", err)
			}
			r := limitsOf(t, c)
			var buf strings.Builder
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false) // show < as Slack receives it
			if err := enc.Encode(r.blocks); err != nil {
				t.Fatal(err)
			}
			var blocks any
			if err := json.Unmarshal([]byte(buf.String()), &blocks); err != nil {
				t.Fatal(err)
			}
			mrkdwnTexts := []string{r.text}
			var walk func(v any)
			walk = func(v any) {
				switch x := v.(type) {
				case map[string]any:
					if x["type"] == "mrkdwn" {
						s, _ := x["text"].(string)
						mrkdwnTexts = append(mrkdwnTexts, s)
					}
					for _, e := range x {
						walk(e)
					}
				case []any:
					for _, e := range x {
						walk(e)
					}
				}
			}
			walk(blocks)
			seen := false
			for _, s := range mrkdwnTexts {
				if strings.ContainsAny(strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(s, "&amp;", ""), "&lt;", ""), "&gt;", ""), "<>&") {
					t.Errorf("mrkdwn text with an unescaped & < or >: %q", s)
				}
				if strings.Contains(s, "&lt;!channel&gt;") {
					seen = true
				}
			}
			if !seen {
				t.Errorf("the field is not shown (escaped) in any mrkdwn text: %s", buf.String())
			}
		})
	}
}
