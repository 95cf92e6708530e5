package main

import (
	"bytes"
	"context"
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
