package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/configs"
)

func TestExampleIsTheDefault(t *testing.T) {
	p := filepath.Join(t.TempDir(), "silas.yaml")
	if err := os.WriteFile(p, []byte(configs.Example), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p, nil)
	if err != nil {
		t.Fatalf("example config does not load: %v", err)
	}
	d := Default()
	if c.HTTP.Listen != d.HTTP.Listen || c.Approvals.TTL != d.Approvals.TTL || c.Output.InlineMaxChars != d.Output.InlineMaxChars ||
		c.Sandbox.MaxOutputBytes != d.Sandbox.MaxOutputBytes || c.Webchat.LoginTTL != d.Webchat.LoginTTL ||
		c.Sandbox.MaxWorkBytes != d.Sandbox.MaxWorkBytes || c.Sandbox.KeepWorkFor != d.Sandbox.KeepWorkFor || c.Sandbox.MaxKeptWorkBytes != d.Sandbox.MaxKeptWorkBytes {
		t.Fatalf("example values differ from defaults:\n%+v\n%+v", c, d)
	}
}

func TestEnvOverrides(t *testing.T) {
	c, err := Load("", []string{"SILAS_HTTP_LISTEN=0.0.0.0:9090", "SILAS_APPROVALS_TTL=2m", "DATABASE_URL=postgres://x@y/z",
		"SILAS_IDENTITIES_OWNERS=webchat:local, telegram:42", "SILAS_DATABASE_AUTO_MIGRATE=false", "PATH=/bin"})
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.Listen != "0.0.0.0:9090" || c.Approvals.TTL.Duration != 2*time.Minute || c.Database.URL != "postgres://x@y/z" ||
		len(c.Identities.Owners) != 2 || c.Identities.Owners[1] != "telegram:42" || c.Database.AutoMigrate {
		t.Fatalf("overrides not applied: %+v", c)
	}
}

// TestSecretsWebListenAny: the compose setting of the secure form loads
// from the environment (deploy/compose.yaml sets it so).
func TestSecretsWebListenAny(t *testing.T) {
	c, err := Load("", []string{"SILAS_SECRETS_WEB_LISTEN=0.0.0.0:8443", "SILAS_SECRETS_WEB_TLS_SELF_SIGNED_LISTEN_ANY=true"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.SecretsWeb.TLS.SelfSignedListenAny || c.SecretsWeb.Listen != "0.0.0.0:8443" || Default().SecretsWeb.TLS.SelfSignedListenAny {
		t.Fatalf("secrets_web = %+v", c.SecretsWeb)
	}
}

func TestErrorsNameTheKey(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  []string
		want string
	}{
		{"unknown key", "htp:\n  listen: x\n", nil, "htp"},
		{"bad duration", "approvals:\n  ttl: soon\n", nil, "soon"},
		{"ttl range", "approvals:\n  ttl: 1s\n", nil, "approvals.ttl"},
		{"bad owner", "identities:\n  owners: [bob]\n", nil, "identities.owners[0]"},
		{"bad level", "log:\n  level: loud\n", nil, "log.level"},
		{"bad listen", "http:\n  listen: nowhere\n", nil, "http.listen"},
		{"bad policy", "policy:\n  rules:\n    - tool: shell\n      decision: perhaps\n      risk: low\n", nil, "policy.rules[0].decision"},
		{"env bad int", "", []string{"SILAS_SANDBOX_MAX_OUTPUT_BYTES=lots"}, "sandbox.max_output_bytes"},
		{"env unknown", "", []string{"SILAS_HTTP_LISTN=x"}, "SILAS_HTTP_LISTN"},
		{"per-chat interval zero", "telegram:\n  limits:\n    per_chat_interval: 0s\n", nil, "telegram.limits.per_chat_interval"},
		{"per-chat interval negative", "telegram:\n  limits:\n    per_chat_interval: -1s\n", nil, "telegram.limits.per_chat_interval"},
		{"preview over inline", "output:\n  preview_chars: 20000\n", nil, "output.preview_chars"},
		{"work dir too small", "sandbox:\n  max_work_bytes: 1000\n", nil, "sandbox.max_work_bytes"},
		{"keep work negative", "sandbox:\n  keep_work_for: -1h\n", nil, "sandbox.keep_work_for"},
		{"kept work negative", "sandbox:\n  max_kept_work_bytes: -1\n", nil, "sandbox.max_kept_work_bytes"},
		{"network DNS not an address", "sandbox:\n  network_dns: resolver.lan\n", nil, "sandbox.network_dns"},
		{"network DNS IPv6", "", []string{"SILAS_SANDBOX_NETWORK_DNS=::1"}, "sandbox.network_dns"},
		{"listen any outside self-signed", "secrets_web:\n  tls:\n    mode: acme\n    self_signed_listen_any: true\n", nil, "secrets_web.tls.self_signed_listen_any"},
		{"listen any for a public url", "", []string{"SILAS_SECRETS_WEB_TLS_SELF_SIGNED_LISTEN_ANY=true", "SILAS_SECRETS_WEB_PUBLIC_URL=https://secrets.example.com"}, "secrets_web.public_url"},
		{"lease ttl too short", "cluster:\n  lease_ttl: 500ms\n", nil, "cluster.lease_ttl"},
		{"lease ttl too long", "", []string{"SILAS_CLUSTER_LEASE_TTL=1h"}, "cluster.lease_ttl"},
		{"heartbeat past a third of the ttl", "cluster:\n  lease_ttl: 6s\n  heartbeat_interval: 3s\n", nil, "cluster.heartbeat_interval"},
		{"heartbeat negative", "", []string{"SILAS_CLUSTER_HEARTBEAT_INTERVAL=-1s"}, "cluster.heartbeat_interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := ""
			if tt.yaml != "" {
				p = filepath.Join(t.TempDir(), "c.yaml")
				os.WriteFile(p, []byte(tt.yaml), 0o600)
			}
			_, err := Load(p, tt.env)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load = %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

// TestClusterTiming: the defaults are the lease and heartbeat timing the
// instances used before the keys existed; the heartbeat follows lease_ttl
// unless set.
func TestClusterTiming(t *testing.T) {
	c, err := Load("", nil)
	if err != nil || c.Cluster.LeaseTTL.Duration != 6*time.Second || c.Cluster.Heartbeat() != 2*time.Second {
		t.Fatalf("defaults: %+v (heartbeat %s), %v", c.Cluster, c.Cluster.Heartbeat(), err)
	}
	c, err = Load("", []string{"SILAS_CLUSTER_LEASE_TTL=3s"})
	if err != nil || c.Cluster.Heartbeat() != time.Second {
		t.Fatalf("lease_ttl 3s: heartbeat %s, %v", c.Cluster.Heartbeat(), err)
	}
	c, err = Load("", []string{"SILAS_CLUSTER_HEARTBEAT_INTERVAL=500ms"})
	if err != nil || c.Cluster.Heartbeat() != 500*time.Millisecond {
		t.Fatalf("heartbeat_interval 500ms: %s, %v", c.Cluster.Heartbeat(), err)
	}
}

func TestDatabaseURLFromFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "db")
	os.WriteFile(p, []byte("postgres://a@b/c\n"), 0o600)
	c, err := Load("", []string{"DATABASE_URL=file:" + p})
	if err != nil || c.Database.URL != "postgres://a@b/c" {
		t.Fatalf("Load = %v, %v", c, err)
	}
}

// TestKubernetesServiceLinks: a Service named silas (or silas-db) makes
// Kubernetes put SILAS_* variables into the pod; they are skipped, while a
// mistyped key is still refused, even one whose name looks like a link.
func TestKubernetesServiceLinks(t *testing.T) {
	links := []string{
		"SILAS_SERVICE_HOST=10.96.12.34",
		"SILAS_SERVICE_PORT=8080",
		"SILAS_SERVICE_PORT_HTTP=8080",
		"SILAS_PORT=tcp://10.96.12.34:8080",
		"SILAS_PORT_8080_TCP=tcp://10.96.12.34:8080",
		"SILAS_PORT_8080_TCP_PROTO=tcp",
		"SILAS_PORT_8080_TCP_PORT=8080",
		"SILAS_PORT_8080_TCP_ADDR=10.96.12.34",
		"SILAS_DB_SERVICE_HOST=fd00::1",
		"SILAS_DB_PORT_5432_TCP=tcp://[fd00::1]:5432",
		"SILAS_METRICS_PORT_9090_UDP_PROTO=udp",
	}
	c, err := Load("", append([]string{"SILAS_HTTP_LISTEN=0.0.0.0:8080"}, links...))
	if err != nil {
		t.Fatalf("service links refused: %v", err)
	}
	if c.HTTP.Listen != "0.0.0.0:8080" {
		t.Fatalf("http.listen = %q", c.HTTP.Listen)
	}
	if got := c.IgnoredEnv(); len(got) != len(links) {
		t.Fatalf("IgnoredEnv = %v, want the %d links", got, len(links))
	}

	refused := []struct {
		name string
		kv   string
	}{
		{"typo", "SILAS_TELEGRAM_MODEE=webhook"},
		{"link-like name, port value", "SILAS_SANDBOX_NETWORK_PORT=443"},
		{"service host not an IP", "SILAS_TELEGRAM_SERVICE_HOST=example.org"},
		{"service port not a number", "SILAS_SERVICE_PORT=http"},
		{"port not a URL", "SILAS_PORT=8080"},
		{"port URL with a host name", "SILAS_PORT_8080_TCP=tcp://silas:8080"},
		{"bad protocol", "SILAS_PORT_8080_TCP_PROTO=http"},
		{"address not an IP", "SILAS_PORT_8080_TCP_ADDR=silas"},
		{"port out of range", "SILAS_PORT_8080_TCP_PORT=70000"},
		{"not a protocol suffix", "SILAS_PORT_8080_HTTP=tcp://10.0.0.1:8080"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			name, _, _ := strings.Cut(tt.kv, "=")
			_, err := Load("", []string{tt.kv})
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Fatalf("Load(%s) = %v, want an error naming %s", tt.kv, err, name)
			}
		})
	}
}

func FuzzServiceLink(f *testing.F) {
	f.Add("SILAS_PORT_8080_TCP", "tcp://10.0.0.1:8080")
	f.Add("SILAS_SERVICE_HOST", "10.0.0.1")
	f.Add("SILAS_TELEGRAM_MODEE", "webhook")
	f.Fuzz(func(t *testing.T, name, value string) {
		// A real configuration key is never taken for a service link.
		if serviceLink(name, value) && known(name) {
			t.Fatalf("%s=%q is both a key and a service link", name, value)
		}
	})
}

// known reports whether name is a configuration key's variable: setting
// it fails, if at all, for its value, not for its name.
func known(name string) bool {
	if !strings.HasPrefix(name, "SILAS_") || strings.ContainsAny(name, "=") || ignoredEnv[name] {
		return false
	}
	err := applyEnv(Default(), []string{name + "=x"})
	return err == nil || !strings.Contains(err.Error(), "does not name a configuration key")
}
