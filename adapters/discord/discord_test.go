package discord

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

const testToken = "MTEx.fake-discord.token-0123456789abcdef"

func TestConfigValidateNamesTheKey(t *testing.T) {
	t.Parallel()
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ok := Config{Token: testToken, ApplicationID: "1100000000000000001"}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string // "" = valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"token from a file", func(c *Config) { c.Token = "file:" + tokFile }, ""},
		{"missing token file", func(c *Config) { c.Token = "file:" + filepath.Join(dir, "nope") }, "discord.token"},
		{"no token", func(c *Config) { c.Token = "" }, "discord.token"},
		{"token with spaces", func(c *Config) { c.Token = "not a token at all" }, "discord.token"},
		{"bad application id", func(c *Config) { c.ApplicationID = "abc" }, "discord.application_id"},
		{"bad mode", func(c *Config) { c.Mode = "webhook" }, "discord.mode"},
		{"http without key", func(c *Config) { c.Mode = ModeHTTP }, "discord.public_key"},
		{"http with key", func(c *Config) { c.Mode, c.PublicKey = ModeHTTP, hex.EncodeToString(pub) }, ""},
		{"short key", func(c *Config) { c.Mode, c.PublicKey = ModeHTTP, "abcd" }, "discord.public_key"},
		{"bad base url", func(c *Config) { c.BaseURL = "discord.com" }, "discord.base_url"},
		{"bad guild", func(c *Config) { c.Guilds = []string{"general"} }, "discord.guilds"},
		{"guild and channel", func(c *Config) { c.Guilds = []string{"1", "2/3"} }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mod(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
				t.Fatalf("error = %v; want one naming %s", err, tc.want)
			case err != nil && strings.Contains(err.Error(), testToken):
				t.Fatalf("error shows the token: %v", err)
			}
		})
	}
}

func TestMessageToTurn(t *testing.T) {
	t.Parallel()
	const me = "1100000000000000002"
	user := &discordgo.User{ID: "1300000000000000001", Username: "olive"}
	msg := func(content string, mod func(*discordgo.Message)) *discordgo.Message {
		m := &discordgo.Message{ID: "1200000000000000001", ChannelID: "1200000000000000009", Author: user, Content: content}
		if mod != nil {
			mod(m)
		}
		return m
	}
	dm := where{}
	guild := where{guild: "1500000000000000001", allowed: true}
	for _, tc := range []struct {
		name     string
		m        *discordgo.Message
		w        where
		act      action
		text     string
		chatKind string
	}{
		{"dm slash text", msg("/run uname -a", nil), dm, actDeliver, "/run uname -a", core.ChatDirect},
		{"dm plain run", msg("Run uname -a", nil), dm, actDeliver, "/run uname -a", core.ChatDirect},
		{"dm chat", msg("hello", nil), dm, actDeliver, "hello", core.ChatDirect},
		{"guild not addressed", msg("run ls", nil), guild, actIgnore, "", ""},
		{"guild mention", msg("<@"+me+"> run ls -l", func(m *discordgo.Message) { m.Mentions = []*discordgo.User{{ID: me}} }), guild, actDeliver, "/run ls -l", core.ChatGroup},
		{"guild nickname mention", msg("hey <@!"+me+"> run ls", nil), guild, actDeliver, "hey run ls", core.ChatGroup},
		{"guild other mention kept", msg("<@"+me+"> ping <@123>", nil), guild, actDeliver, "ping <@123>", core.ChatGroup},
		{"guild reply to bot", msg("run ls", func(m *discordgo.Message) {
			m.Type = discordgo.MessageTypeReply
			m.ReferencedMessage = &discordgo.Message{ID: "1", Author: &discordgo.User{ID: me}}
		}), guild, actDeliver, "/run ls", core.ChatGroup},
		{"guild not allowed", msg("<@"+me+"> run ls", nil), where{guild: "1", allowed: false}, actIgnore, "", ""},
		{"from a bot", msg("run ls", func(m *discordgo.Message) { m.Author = &discordgo.User{ID: "5", Bot: true} }), dm, actIgnore, "", ""},
		{"from a webhook", msg("run ls", func(m *discordgo.Message) { m.WebhookID = "7" }), dm, actIgnore, "", ""},
		{"empty content", msg("", nil), dm, actIgnore, "", ""},
		{"join message", msg("x", func(m *discordgo.Message) { m.Type = discordgo.MessageTypeGuildMemberJoin }), dm, actIgnore, "", ""},
		{"bad id", msg("x", func(m *discordgo.Message) { m.ID = "abc" }), dm, actMalformed, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := messageToTurn(tc.m, tc.w, me, "discord", MethodGateway)
			if in.act != tc.act {
				t.Fatalf("act = %v (%s); want %v", in.act, in.reason, tc.act)
			}
			if tc.act != actDeliver {
				return
			}
			if err := in.turn.Validate(); err != nil {
				t.Fatal(err)
			}
			if in.turn.Text != tc.text || in.turn.ChatKind != tc.chatKind || in.turn.Sender != "discord:"+core.IdentityID(user.ID) ||
				in.turn.EventID != "m"+tc.m.ID || in.turn.Conversation != "discord:"+core.ConversationID(tc.m.ChannelID) {
				t.Fatalf("turn = %+v", in.turn)
			}
		})
	}
}

func TestVerifyWindow(t *testing.T) {
	t.Parallel()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Unix(1_800_000_000, 0)
	a, err := New(Config{Token: testToken, ApplicationID: "1", Mode: ModeHTTP, PublicKey: hex.EncodeToString(pub), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"type":1}`)
	sign := func(ts string, b []byte) string {
		return hex.EncodeToString(ed25519.Sign(priv, append([]byte(ts), b...)))
	}
	at := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).Unix(), 10) }
	for _, tc := range []struct {
		name    string
		sig, ts string
		want    bool
	}{
		{"fresh", sign(at(0), body), at(0), true},
		{"4m old", sign(at(-4*time.Minute), body), at(-4 * time.Minute), true},
		{"6m old", sign(at(-6*time.Minute), body), at(-6 * time.Minute), false},
		{"6m ahead", sign(at(6*time.Minute), body), at(6 * time.Minute), false},
		{"timestamp swapped", sign(at(0), body), at(-time.Second), false},
		{"no signature", "", at(0), false},
		{"not hex", "zz", at(0), false},
		{"no timestamp", sign("", body), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := a.verify(tc.sig, tc.ts, body); got != tc.want {
				t.Fatalf("verify = %v; want %v", got, tc.want)
			}
		})
	}
}

func TestRenderCardEscapesAndStyles(t *testing.T) {
	t.Parallel()
	c := &cards.Card{ID: "dqkc53c53bi4vzkowpdi4w34xm", Kind: cards.KindApproval, Intent: "Run @everyone", Risk: cards.RiskHigh,
		Command: "echo ```; @everyone", Rationale: "**bold** <@123>", Status: cards.StatusPending,
		Choices: []cards.Choice{{ID: "approve", Label: "Run", Style: cards.StylePrimary}, {ID: "decline", Label: "Decline", Style: cards.StyleDanger}}}
	r, err := renderCard(c)
	if err != nil {
		t.Fatal(err)
	}
	d := r.embeds[0].Description
	if strings.Count(d, "```") != 2 {
		t.Errorf("the command closed its code block: %q", d)
	}
	if !strings.Contains(d, `\*\*bold\*\* \<\@123\>`) {
		t.Errorf("rationale not escaped: %q", d)
	}
	row := r.components[0].(discordgo.ActionsRow)
	if b := row.Components[0].(discordgo.Button); b.Style != discordgo.SuccessButton || b.CustomID != "c:dqkc53c53bi4vzkowpdi4w34xm:approve" {
		t.Errorf("recommended button = %+v", b)
	}
	if b := row.Components[1].(discordgo.Button); b.Style != discordgo.DangerButton {
		t.Errorf("decline button = %+v", b)
	}
	c.Status = cards.StatusDone
	if r, _ := renderCard(c); len(r.components) != 0 {
		t.Errorf("a decided card keeps buttons: %+v", r.components)
	}
}

func TestCommandsEqual(t *testing.T) {
	t.Parallel()
	if !commandsEqual(Commands(), Commands()) {
		t.Fatal("commands differ from themselves")
	}
	changed := Commands()
	changed[0].Description = "something else"
	if commandsEqual(changed, Commands()) {
		t.Fatal("a changed description is not noticed")
	}
}

// stubRT answers every request with a rate-limit reset of resetAfter.
type stubRT struct{ resetAfter string }

func (s stubRT) RoundTrip(r *http.Request) (*http.Response, error) {
	h := http.Header{}
	h.Set("X-RateLimit-Remaining", "0")
	h.Set("X-RateLimit-Reset-After", s.resetAfter)
	return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader("{}")), Request: r}, nil
}

// TestBucketWaitsOutTheAnnouncedReset: a bucket that ran out waits at
// least the X-RateLimit-Reset-After Discord announced. discordgo alone
// waits a millisecond less for a third of the values (it truncates the
// fraction's product with 1000: 1.003 s → 1.002 s), and a message sent at
// that instant was one over the limit (the Discord fake flagged it in
// TestStormAndOutage).
func TestBucketWaitsOutTheAnnouncedReset(t *testing.T) {
	t.Parallel()
	for _, ra := range []string{"1.003", "1.005", "2.009", "4.999", "0.250", "0"} {
		announced, err := strconv.ParseFloat(ra, 64)
		if err != nil {
			t.Fatal(err)
		}
		want := time.Duration(math.Round(announced*1000)) * time.Millisecond
		cli := &http.Client{Transport: rebase{base: "http://discord.invalid/api/v10", next: stubRT{ra}}}
		rl := discordgo.NewRatelimiter()
		b := rl.LockBucket("channels/1/messages")
		start := time.Now()
		resp, err := cli.Get(discordgo.EndpointChannelMessages("1"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if err := b.Release(resp.Header); err != nil {
			t.Fatal(err)
		}
		wait := rl.GetWaitTime(b, 1)
		// The bucket resets no later than now+wait (a stall here only
		// adds to it); the reset was announced after start.
		if got := time.Now().Add(wait).Sub(start); got < want {
			t.Errorf("Reset-After %s: the bucket waits until %v after the answer, short of %v", ra, got, want)
		}
	}
}
