package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMCPServers(t *testing.T) {
	tests := []struct {
		name, yaml, err string
	}{
		{"stdio and http", `
mcp:
  servers:
    - name: files
      command: /usr/bin/mcp-files
      args: ["--root", "/srv"]
      env: {LOG: quiet}
      secrets: [files_token]
      timeout: 30s
    - name: web
      url: https://mcp.example.com/mcp
      allowed_hosts: [mcp.example.com]
      bearer_secret: web_token
      trusted: true
    - name: local
      url: http://127.0.0.1:9000/mcp
`, ""},
		{"no transport", "mcp:\n  servers:\n    - name: x\n", "mcp.servers[0].command: a server needs a command (stdio) or a url"},
		{"both", "mcp:\n  servers:\n    - name: x\n      command: a\n      url: https://h/mcp\n", "mcp.servers[0].url: set command (stdio) or url"},
		{"plain http elsewhere", "mcp:\n  servers:\n    - name: x\n      url: http://mcp.example.com/mcp\n", "mcp.servers[0].url: \"http://mcp.example.com/mcp\" must be https"},
		{"host not allowed", "mcp:\n  servers:\n    - name: x\n      url: https://a.example/mcp\n      allowed_hosts: [b.example]\n", "mcp.servers[0].allowed_hosts: the url's host \"a.example\" is not in allowed_hosts"},
		{"bad name", "mcp:\n  servers:\n    - name: Files!\n      command: a\n", "mcp.servers[0].name"},
		{"twice", "mcp:\n  servers:\n    - name: a\n      command: a\n    - name: a\n      command: b\n", "mcp.servers[1].name: \"a\" is configured twice"},
		{"credentials in url", "mcp:\n  servers:\n    - name: a\n      url: https://u:p@h/mcp\n", "mcp.servers[0].url"},
		{"bearer on stdio", "mcp:\n  servers:\n    - name: a\n      command: a\n      bearer_secret: t\n", "mcp.servers[0].command: bearer_secret and allowed_hosts are for a url server"},
		{"bad secret name", "mcp:\n  servers:\n    - name: a\n      command: a\n      secrets: [\"a b\"]\n", "mcp.servers[0].secrets[0]"},
		{"bad timeout", "mcp:\n  servers:\n    - name: a\n      command: a\n      timeout: 2h\n", "mcp.servers[0].timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "silas.yaml")
			if err := os.WriteFile(p, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := Load(p, nil)
			if tt.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				s := c.MCP.Servers
				if len(s) != 3 || s[0].Timeout != 30*time.Second || s[0].Env["LOG"] != "quiet" || !s[1].Trusted || s[1].BearerSecret != "web_token" {
					t.Fatalf("decoded %+v", s)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("error %v, want one containing %q", err, tt.err)
			}
		})
	}
}
