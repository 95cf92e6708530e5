package mcpclient

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// Server is one entry of mcp.servers: an MCP server whose tools Silas
// offers behind its gate. Exactly one of Command (a stdio server, run in
// the sandbox) and URL (streamable HTTP) is set.
type Server struct {
	// Name identifies the server in policy rules (mcp:<name>/<tool>), cards
	// and the audit log: 1-40 of a-z, 0-9, '-' and '_'.
	Name string `yaml:"name"`
	// Command and Args start a stdio server inside the sandbox (no data
	// directory, its own work dir, network off unless Network).
	Command string   `yaml:"command"`
	Args    []string `yaml:"args"`
	// Env is the server's environment (plain values; nothing of Silas's
	// own environment is passed).
	Env map[string]string `yaml:"env"`
	// Secrets names stored secrets (`/secret NAME`) the server gets as
	// environment variables, named in upper case, as an action's secrets.
	Secrets []string `yaml:"secrets"`
	// Network lets a stdio server reach the network (off by default).
	Network bool `yaml:"network"`
	// URL is a streamable-HTTP endpoint: https, or http on a loopback
	// address.
	URL string `yaml:"url"`
	// AllowedHosts lists the hosts requests may go to; empty means the
	// URL's host only. A redirect elsewhere is refused.
	AllowedHosts []string `yaml:"allowed_hosts"`
	// BearerSecret names a stored secret sent as "Authorization: Bearer"
	// to an HTTP server; never logged.
	BearerSecret string `yaml:"bearer_secret"`
	// Trusted lets the tools' readOnlyHint lower a call's risk to low (by
	// default an MCP tool is high, whatever its annotations say).
	Trusted bool `yaml:"trusted"`
	// Timeout bounds each tools/call (default 60s) and each connection
	// attempt.
	Timeout time.Duration `yaml:"timeout"`
}

// ValidName checks a server name.
func ValidName(name string) error {
	if len(name) == 0 || len(name) > 40 || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
		return fmt.Errorf("%q: use 1-40 of a-z, 0-9, '-' and '_'", name)
	}
	return nil
}

// Check validates servers; errors name the key (mcp.servers[i].field).
func Check(servers []Server) error {
	seen := map[string]bool{}
	for i, s := range servers {
		key := func(field string) string { return fmt.Sprintf("mcp.servers[%d].%s", i, field) }
		if err := ValidName(s.Name); err != nil {
			return fmt.Errorf("%s: %w", key("name"), err)
		}
		if seen[s.Name] {
			return fmt.Errorf("%s: %q is configured twice", key("name"), s.Name)
		}
		seen[s.Name] = true
		switch {
		case s.Command == "" && s.URL == "":
			return fmt.Errorf("%s: a server needs a command (stdio) or a url (streamable HTTP)", key("command"))
		case s.Command != "" && s.URL != "":
			return fmt.Errorf("%s: set command (stdio) or url (streamable HTTP), not both", key("url"))
		}
		if s.Timeout < 0 || s.Timeout > time.Hour {
			return fmt.Errorf("%s: %s must be between 0 (default 60s) and 1h", key("timeout"), s.Timeout)
		}
		for j, n := range s.Secrets {
			if !validSecretName(n) {
				return fmt.Errorf("%s[%d]: %q is not a secret name (letters, digits, _ and -)", key("secrets"), j, n)
			}
		}
		if s.Command != "" {
			if s.BearerSecret != "" || len(s.AllowedHosts) > 0 {
				return fmt.Errorf("%s: bearer_secret and allowed_hosts are for a url server; a stdio server gets secrets as environment variables", key("command"))
			}
			for k := range s.Env {
				if k == "" || strings.ContainsAny(k, "=\x00") {
					return fmt.Errorf("%s: %q is not an environment variable name", key("env"), k)
				}
			}
			continue
		}
		if len(s.Args) > 0 || len(s.Env) > 0 || len(s.Secrets) > 0 || s.Network {
			return fmt.Errorf("%s: args, env, secrets and network are for a stdio server (command)", key("url"))
		}
		u, err := url.Parse(s.URL)
		if err != nil || u.Host == "" || u.User != nil {
			return fmt.Errorf("%s: %q must be an absolute URL without credentials (use bearer_secret)", key("url"), s.URL)
		}
		if u.Scheme != "https" && !(u.Scheme == "http" && Loopback(u.Hostname())) {
			return fmt.Errorf("%s: %q must be https (http only to a loopback address)", key("url"), s.URL)
		}
		if s.BearerSecret != "" && !validSecretName(s.BearerSecret) {
			return fmt.Errorf("%s: %q is not a secret name", key("bearer_secret"), s.BearerSecret)
		}
		for j, h := range s.AllowedHosts {
			if h == "" || strings.ContainsAny(h, "/ :@") {
				return fmt.Errorf("%s[%d]: %q must be a host name", key("allowed_hosts"), j, h)
			}
		}
		if len(s.AllowedHosts) > 0 && !hostIn(u.Hostname(), s.AllowedHosts) {
			return fmt.Errorf("%s: the url's host %q is not in allowed_hosts", key("allowed_hosts"), u.Hostname())
		}
	}
	return nil
}

// Loopback reports whether host is localhost or a loopback address.
func Loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func hostIn(host string, allowed []string) bool {
	for _, a := range allowed {
		if strings.EqualFold(strings.TrimSuffix(host, "."), strings.TrimSuffix(a, ".")) {
			return true
		}
	}
	return false
}

func validSecretName(n string) bool {
	if n == "" || len(n) > 64 {
		return false
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
