package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The adapters' sections decode straight into their time.Duration fields
// with config.Duration's rules: a bare 0 is zero, anything else needs a
// unit, and the error names the line.
func TestAdapterDurations(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       string // error substring; "" = loads
		check      func(*Config) bool
	}{
		{"bare zero is never edit", "whatsapp:\n  edit_window: 0\n", "", func(c *Config) bool { return c.WhatsApp.EditWindow == 0 }},
		{"with unit", "telegram:\n  poll_timeout: 20s\n", "", func(c *Config) bool { return c.Telegram.PollTimeout == 20*time.Second }},
		{"flow style zero", "slack: {http_timeout: 0, ping_interval: 5s}\n", "", func(c *Config) bool {
			return c.Slack.HTTPTimeout == 0 && c.Slack.PingInterval == 5*time.Second
		}},
		{"quoted", "telegram:\n  limits:\n    per_chat_interval: \"2s\"\n", "", func(c *Config) bool { return c.Telegram.Limits.PerChatInterval == 2*time.Second }},
		{"no unit", "telegram:\n  poll_timeout: 30\n", `line 2: "30" is not a duration like 30s or 5m`, nil},
		{"not a duration", "slack:\n  limits:\n    per_channel_interval: soon\n", `line 3: "soon" is not a duration like 30s or 5m`, nil},
		{"later error keeps its line", "whatsapp:\n  edit_window: 0\n  colour: red\n", "line 3: field colour not found", nil},
		{"written zero still refused by its check", "telegram:\n  limits:\n    per_chat_interval: 0\n", "telegram.limits.per_chat_interval", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(p, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := Load(p, nil)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("Load = %v, want an error with %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c) {
				t.Fatalf("not decoded as written: %+v %+v %+v %+v", c.Telegram, c.Slack, c.Discord, c.WhatsApp)
			}
		})
	}
}

// Every adapter spec names its own section of Config, so serve, doctor and
// config check reach each platform by the one list.
func TestAdaptersAreSections(t *testing.T) {
	c := Default()
	ct := reflect.TypeOf(*c)
	seen := map[string]bool{}
	for _, a := range c.Adapters() {
		if _, ok := fieldByTag(ct, a.Name); !ok {
			t.Errorf("adapter %q has no config section of that name", a.Name)
		}
		if seen[a.Name] {
			t.Errorf("adapter %q listed twice", a.Name)
		}
		seen[a.Name] = true
		if a.Title == "" || a.Check == nil || a.Build == nil || a.Doctor == nil {
			t.Errorf("adapter %q: spec incomplete: %+v", a.Name, a)
		}
		if a.Name == "webchat" {
			// `make run`: the web chat is on by default, and answers only
			// its logged-in browser, so it has no DM policy.
			if !a.Enabled || a.DMPolicy != "" {
				t.Errorf("webchat: default enabled=%v dm_policy=%q, want enabled and none", a.Enabled, a.DMPolicy)
			}
			continue
		}
		if a.Enabled || a.DMPolicy != "pairing" {
			t.Errorf("adapter %q: default enabled=%v dm_policy=%q, want disabled and pairing", a.Name, a.Enabled, a.DMPolicy)
		}
	}
	for _, name := range []string{"webchat", "telegram", "slack", "discord", "whatsapp"} {
		if !seen[name] {
			t.Errorf("adapter %q missing from Adapters", name)
		}
	}
}
