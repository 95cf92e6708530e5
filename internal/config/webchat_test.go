package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The webchat: section is decoded into the adapter's own Config, and what
// is written there reaches the spec serve builds the channel from.
func TestWebchatSection(t *testing.T) {
	tests := []struct {
		name  string
		yaml  string
		env   []string
		check func(*Config) bool
	}{
		{"defaults", "", nil, func(c *Config) bool {
			w := c.Webchat
			return w.Enabled && w.Identity == "webchat:local" && w.LoginTTL == time.Hour && w.SessionTTL == 7*24*time.Hour
		}},
		{"file", "webchat:\n  identity: webchat:ada\n  login_ttl: 5m\n  session_ttl: 2h\n", nil, func(c *Config) bool {
			w := c.Webchat
			return w.Enabled && w.Identity == "webchat:ada" && w.LoginTTL == 5*time.Minute && w.SessionTTL == 2*time.Hour
		}},
		{"disabled in the file", "webchat:\n  enabled: false\n", nil, func(c *Config) bool { return !c.Webchat.Enabled }},
		{"environment", "", []string{"SILAS_WEBCHAT_ENABLED=false", "SILAS_WEBCHAT_IDENTITY=webchat:bob", "SILAS_WEBCHAT_LOGIN_TTL=10m",
			"SILAS_WEBCHAT_SESSION_TTL=3h"}, func(c *Config) bool {
			w := c.Webchat
			return !w.Enabled && w.Identity == "webchat:bob" && w.LoginTTL == 10*time.Minute && w.SessionTTL == 3*time.Hour
		}},
		// A disabled web chat's keys are not checked (as before it was an
		// adapter): they mean nothing until it is enabled.
		{"disabled is not checked", "webchat:\n  enabled: false\n  identity: nobody\n", nil, func(c *Config) bool { return c.Webchat.Identity == "nobody" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := loadYAML(t, tt.yaml, tt.env)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c) {
				t.Fatalf("webchat section not as written: %+v", c.Webchat)
			}
			a := c.Adapters()[0]
			if a.Name != "webchat" || a.Enabled != c.Webchat.Enabled {
				t.Fatalf("first adapter %q enabled=%v, want webchat enabled=%v", a.Name, a.Enabled, c.Webchat.Enabled)
			}
		})
	}
}

// A bad webchat key is refused with an error naming it, whether it comes
// from the file or the environment.
func TestWebchatKeys(t *testing.T) {
	tests := []struct {
		name, yaml string
		env        []string
		want       string
	}{
		{"identity of another platform", "webchat:\n  identity: telegram:1\n", nil, `config: webchat.identity: "telegram:1" must be webchat:<name>`},
		{"identity without a name", "", []string{"SILAS_WEBCHAT_IDENTITY=webchat:"}, "config: webchat.identity:"},
		{"login link too short", "webchat:\n  login_ttl: 30s\n", nil, "config: webchat.login_ttl: must be at least 1m"},
		{"session too long", "webchat:\n  session_ttl: 721h\n", nil, "config: webchat.session_ttl: 721h0m0s must be between 1m and 720h (30 days)"},
		{"session too short", "", []string{"SILAS_WEBCHAT_SESSION_TTL=59s"}, "config: webchat.session_ttl:"},
		{"session zero", "webchat:\n  session_ttl: 0\n", nil, "config: webchat.session_ttl:"},
		{"not a duration", "webchat:\n  login_ttl: soon\n", nil, `line 2: "soon" is not a duration like 30s or 5m`},
		{"env not a duration", "", []string{"SILAS_WEBCHAT_LOGIN_TTL=soon"}, "webchat.login_ttl (from SILAS_WEBCHAT_LOGIN_TTL)"},
		{"unknown key", "webchat:\n  identiy: webchat:x\n", nil, "line 2: field identiy not found"},
		{"wiring is no key", "webchat:\n  history: 5\n", nil, "line 2: field history not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadYAML(t, tt.yaml, tt.env)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// loadYAML loads yaml (none when "") as the configuration file, with env.
func loadYAML(t *testing.T, yaml string, env []string) (*Config, error) {
	t.Helper()
	p := ""
	if yaml != "" {
		p = filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return Load(p, env)
}
