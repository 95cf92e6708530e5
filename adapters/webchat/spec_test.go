package webchat

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/spec"
	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// storage is what serve hands the spec as its state store: the core's
// storage, which also keeps the transcript and the outputs.
type storage struct{ fakeOutputs }

func (storage) GetState(context.Context, core.ChannelName, string) (string, bool, error) {
	return "", false, nil
}
func (storage) SetState(context.Context, core.ChannelName, string, string) error { return nil }
func (storage) Transcript(context.Context, core.ChannelName, core.ConversationID, int) ([]core.TranscriptEntry, error) {
	return nil, nil
}
func (storage) TranscriptCard(context.Context, core.ChannelName, core.ConversationID, cards.ID) (core.TranscriptEntry, error) {
	return core.TranscriptEntry{}, core.ErrNotFound
}

var bannerRe = regexp.MustCompile(`Silas web chat: http://127\.0\.0\.1:8080/#login=([A-Za-z0-9_-]+)\n\(one-time login link, valid 5m0s; restart for a new one\)`)

// What the webchat: section says reaches the channel the spec builds: the
// identity names the conversation, login_ttl the printed link's life,
// session_ttl the login's; the page is served at "/" and reads the
// conversation from the core's storage.
func TestSpecBuild(t *testing.T) {
	c := Defaults()
	c.Identity, c.LoginTTL, c.SessionTTL = "webchat:ada", 5*time.Minute, 2*time.Hour
	s := c.Spec()
	if s.Name != "webchat" || !s.Enabled || s.DMPolicy != "" || s.Check() != nil {
		t.Fatalf("spec %+v, check %v", s, s.Check())
	}
	b, err := s.Build(context.Background(), spec.Deps{State: storage{}})
	if err != nil {
		t.Fatal(err)
	}
	a := b.Channel.(*Adapter)
	if a.Name() != "webchat" || a.Conversation() != "webchat:ada" {
		t.Fatalf("channel %q, conversation %q", a.Name(), a.Conversation())
	}
	if a.cfg.Transcript == nil || a.cfg.Outputs == nil || a.cfg.State == nil {
		t.Fatal("the conversation is not read from the core's storage")
	}
	if len(b.Routes) != 1 || b.Routes[0].Pattern != "/" || b.Banner == nil {
		t.Fatalf("routes %+v, banner %v", b.Routes, b.Banner != nil)
	}
	var out strings.Builder
	b.Banner(&out, "http://127.0.0.1:8080")
	m := bannerRe.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("banner:\n%s", out.String())
	}
	before := time.Now()
	r := httptest.NewRequest("POST", "/login", strings.NewReader(`{"secret":"`+m[1]+`"}`))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	b.Routes[0].Handler.ServeHTTP(w, r)
	res := w.Result()
	if res.StatusCode != http.StatusNoContent || len(res.Cookies()) != 1 {
		t.Fatalf("login with the printed secret: %d %v", res.StatusCode, res.Cookies())
	}
	if exp := res.Cookies()[0].Expires; exp.Before(before.Add(2*time.Hour-time.Minute)) || exp.After(time.Now().Add(2*time.Hour+time.Minute)) {
		t.Fatalf("session ends %v, want in 2h (webchat.session_ttl)", exp)
	}
}

// Check names the bad key as webchat.<key>, and leaves a disabled web chat
// alone.
func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		want string // "" = valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"identity", func(c *Config) { c.Identity = "local" }, `webchat.identity: "local" must be webchat:<name>`},
		{"identity of another platform", func(c *Config) { c.Identity = "telegram:1" }, "webchat.identity:"},
		{"empty name", func(c *Config) { c.Identity = "webchat:" }, "webchat.identity:"},
		{"login ttl", func(c *Config) { c.LoginTTL = 59 * time.Second }, "webchat.login_ttl: must be at least 1m"},
		{"session ttl short", func(c *Config) { c.SessionTTL = 0 }, "webchat.session_ttl: 0s must be between 1m and 720h (30 days)"},
		{"session ttl long", func(c *Config) { c.SessionTTL = 721 * time.Hour }, "webchat.session_ttl:"},
		{"session ttl longest", func(c *Config) { c.SessionTTL = 720 * time.Hour }, ""},
		{"disabled", func(c *Config) { c.Enabled, c.Identity, c.LoginTTL = false, "x", 0 }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Defaults()
			tt.edit(&c)
			err := c.Check()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Check = %v, want %q", err, tt.want)
			}
		})
	}
}
