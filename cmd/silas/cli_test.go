package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCLI(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		code    int
		wantOut string
	}{
		{"no command", nil, nil, 2, "Usage: silas"},
		{"unknown command", []string{"launch"}, nil, 2, `unknown command "launch"`},
		{"serve help", []string{"serve", "--help"}, nil, 0, "Usage: silas serve"},
		{"audit help", []string{"audit", "--help"}, nil, 0, "audit verify"},
		{"pair help", []string{"pair", "--help"}, nil, 0, "one-time pairing code"},
		{"keys without init", []string{"keys"}, nil, 2, "keys init"},
		{"version", []string{"version"}, nil, 0, "silas "},
		{"config example", []string{"config", "example"}, nil, 0, "approvals:"},
		{"config check ok", []string{"config", "check"}, nil, 0, "configuration is valid"},
		{"config check names the key", []string{"config", "check"}, map[string]string{"SILAS_APPROVALS_TTL": "1s"}, 1, "approvals.ttl"},
		{"bad flag", []string{"audit", "tail", "--bogus"}, nil, 2, "flag provided but not defined"},
		{"config check runs the telegram adapter's validation: token", []string{"config", "check"},
			map[string]string{"SILAS_TELEGRAM_ENABLED": "true", "SILAS_TELEGRAM_MODE": "webhok", "SILAS_TELEGRAM_TOKEN": "garbage"}, 1, "telegram.token"},
		{"config check runs the telegram adapter's validation: mode", []string{"config", "check"},
			map[string]string{"SILAS_TELEGRAM_ENABLED": "true", "SILAS_TELEGRAM_MODE": "webhok", "SILAS_TELEGRAM_TOKEN": "123456:ABCDEFGHIJKLMNOP"}, 1, "telegram.mode"},
		{"config check valid telegram", []string{"config", "check"},
			map[string]string{"SILAS_TELEGRAM_ENABLED": "true", "SILAS_TELEGRAM_TOKEN": "123456:ABCDEFGHIJKLMNOP"}, 0, "configuration is valid"},
		{"config check skips a disabled adapter", []string{"config", "check"},
			map[string]string{"SILAS_TELEGRAM_MODE": "webhok"}, 0, "configuration is valid"},
		// serve reads these file: values and refuses to start without them;
		// config check must say so too.
		{"config check reads llm.api_key's file", []string{"config", "check"}, llmKeyEnv("file:/nonexistent/silas-llm-key"), 1, "llm.api_key"},
		{"config check with a readable llm.api_key", []string{"config", "check"}, llmKeyEnv("sk-not-a-real-key"), 0, "configuration is valid"},
		{"config check reads secrets.key's file", []string{"config", "check"},
			map[string]string{"SILAS_SECRETS_KEY": "file:/nonexistent/silas-secrets-key"}, 1, "secrets.key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var out, errOut bytes.Buffer
			code := run(context.Background(), tt.args, &out, &errOut)
			all := out.String() + errOut.String()
			if code != tt.code || !strings.Contains(all, tt.wantOut) {
				t.Fatalf("run(%q) = %d, output:\n%s\nwant %d and %q", tt.args, code, all, tt.code, tt.wantOut)
			}
		})
	}
}

// llmKeyEnv configures the LLM agent with key as llm.api_key.
func llmKeyEnv(key string) map[string]string {
	return map[string]string{"SILAS_AGENT_KIND": "llm", "SILAS_LLM_BASE_URL": "http://127.0.0.1:9/v1",
		"SILAS_LLM_MODELS_PROXY": "m", "SILAS_LLM_API_KEY": key}
}

// TestConfigFlagPlacement: --config (or -config) works before the command
// and after it, as people type it; after the command wins.
func TestConfigFlagPlacement(t *testing.T) {
	t.Setenv("SILAS_CONFIG", "")
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("approvals:\n  ttl: 1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("approvals:\n  ttl: 2m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		code    int
		wantOut string
	}{
		{"before the command", []string{"--config", bad, "config", "check"}, 1, "approvals.ttl"},
		{"after the command", []string{"config", "check", "--config", bad}, 1, "approvals.ttl"},
		{"single dash after the command", []string{"config", "check", "-config", bad}, 1, "approvals.ttl"},
		{"after the command wins", []string{"--config", bad, "config", "check", "--config", good}, 0, "configuration is valid"},
		// serve loads the configuration before it touches a database, so a
		// bad file shows that serve read the one given after it.
		{"serve --config FILE", []string{"serve", "--config", bad}, 1, "approvals.ttl"},
		{"serve -config=FILE", []string{"serve", "-config=" + bad}, 1, "approvals.ttl"},
		{"--config FILE serve", []string{"--config", bad, "serve"}, 1, "approvals.ttl"},
		{"missing file after the command", []string{"serve", "--config", filepath.Join(dir, "none.yaml")}, 1, "none.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(context.Background(), tt.args, &out, &errOut)
			all := out.String() + errOut.String()
			if code != tt.code || !strings.Contains(all, tt.wantOut) {
				t.Fatalf("run(%q) = %d, output:\n%s\nwant %d and %q", tt.args, code, all, tt.code, tt.wantOut)
			}
		})
	}
}
