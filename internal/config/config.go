// Package config loads Silas's configuration: YAML (every key documented in
// configs/silas.example.yaml), then SILAS_* environment overrides, then
// validation that names the bad key.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/silas-gateway/silas/adapters/discord"
	"github.com/silas-gateway/silas/adapters/slack"
	"github.com/silas-gateway/silas/adapters/spec"
	"github.com/silas-gateway/silas/adapters/telegram"
	"github.com/silas-gateway/silas/adapters/webchat"
	"github.com/silas-gateway/silas/adapters/whatsapp"
	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/internal/httpserve"
)

// Duration is a time.Duration written as "5m", "20s" in YAML.
type Duration struct{ time.Duration }

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration like 30s or 5m", n.Line, n.Value)
	}
	d.Duration = v
	return nil
}

// Config is the whole configuration. Each field names its YAML key; the
// example file (configs/silas.example.yaml) documents the keys at length
// and shows every default.
type Config struct {
	// DataDir (data_dir) holds the signing key, sandbox work directories
	// and, without database.url, the local PostgreSQL cluster.
	DataDir string `yaml:"data_dir"`
	// Database is where everything durable lives (PostgreSQL).
	Database struct {
		// URL (database.url, env DATABASE_URL) is the PostgreSQL URL or
		// key=value string, or file:/path; "" starts a local cluster under
		// data_dir/pg.
		URL string `yaml:"url"`
		// MigrateURL connects as the role that owns the schema and runs
		// migrations; "" means URL (docs/operations.md).
		MigrateURL string `yaml:"migrate_url"`
		// AutoMigrate applies migrations when serve starts; when false,
		// serve refuses a schema that is behind.
		AutoMigrate bool `yaml:"auto_migrate"`
	} `yaml:"database"`
	// HTTP is the main listener and the limits every listener shares.
	HTTP struct {
		// Listen is the address of the web chat, webhooks and /healthz,
		// /readyz, /metrics (loopback by default).
		Listen string `yaml:"listen"`
		// ShutdownGrace is how long SIGTERM waits for in-flight work.
		ShutdownGrace Duration `yaml:"shutdown_grace"`
		// Limits of every HTTP listener (web chat and ops, webhooks,
		// secure form): see internal/httpserve.
		//
		// ReadHeaderTimeout bounds reading a request's headers.
		ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
		// ReadTimeout bounds reading a whole request, body included.
		ReadTimeout Duration `yaml:"read_timeout"`
		// WriteTimeout bounds writing a response (WebSockets clear it).
		WriteTimeout Duration `yaml:"write_timeout"`
		// IdleTimeout closes a keep-alive connection left idle this long.
		IdleTimeout Duration `yaml:"idle_timeout"`
		// MaxHeaderBytes bounds a request's headers.
		MaxHeaderBytes int `yaml:"max_header_bytes"`
		// MaxConnections are open at once per listener; more wait.
		MaxConnections int `yaml:"max_connections"`
		// MaxConnectionsPerClient are open at once from one client
		// address; at it, that client's idle connections are closed first.
		MaxConnectionsPerClient int `yaml:"max_connections_per_client"`
		// AllowedHosts are extra Host header values a loopback listener
		// serves (a reverse proxy's public name); others get 421.
		AllowedHosts []string `yaml:"allowed_hosts"`
	} `yaml:"http"`
	// Log is the gateway's own log (stderr).
	Log struct {
		// Level is debug, info, warn or error.
		Level string `yaml:"level"`
		// Format is text or json.
		Format string `yaml:"format"`
	} `yaml:"log"`
	// Identities declared in config; pairing (`silas pair`) adds more,
	// signed, in the database.
	Identities struct {
		// Owners have owner trust ("platform:id", e.g. telegram:123456).
		Owners []string `yaml:"owners"`
		// Allowed have auth trust: they may talk to Silas and approve what
		// policy grants role:auth.
		Allowed []string `yaml:"allowed"`
	} `yaml:"identities"`
	// Approvals bounds how long a decision can wait and how long it holds.
	Approvals struct {
		// TTL is how long an approval card can be decided (10s-168h).
		TTL Duration `yaml:"ttl"`
		// TokenTTL is how long an approval token stays valid between
		// decision and execution (10s-24h).
		TokenTTL Duration `yaml:"token_ttl"`
		// RouteTo lists where an approval card goes when nobody in the
		// requesting conversation may decide it: identities
		// ("telegram:123", an owner or a listed approver) and channel
		// names ("slack") the copies are limited to. Empty: every owner's
		// newest direct conversation on each running channel
		// (docs/approvals.md "Routing").
		RouteTo []string `yaml:"route_to"`
		// SelfApproval false: a requester may not approve their own
		// request, even as an owner, for the risks in SelfApprovalRisks
		// (default true: they may).
		SelfApproval *bool `yaml:"self_approval"`
		// SelfApprovalRisks are the risks self_approval: false applies to
		// (default every risk).
		SelfApprovalRisks []string `yaml:"self_approval_risks"`
	} `yaml:"approvals"`
	// Health watches the channels (docs/operations.md "Channel health").
	Health struct {
		// DeafAfter is how long a channel may hear nothing from its
		// platform (no event, poll round trip or keepalive) before the
		// owners are told on another channel; 0 turns it off (0 or 30s-24h).
		DeafAfter Duration `yaml:"deaf_after"`
	} `yaml:"health"`
	// Sandbox configures every execution's isolation and limits
	// (docs/sandbox.md).
	Sandbox struct {
		// Dir holds per-execution work directories; "" means data_dir/sandbox.
		Dir string `yaml:"dir"`
		// Timeout is the default execution timeout.
		Timeout Duration `yaml:"timeout"`
		// MaxOutputBytes are kept from stdout and from stderr each.
		MaxOutputBytes int `yaml:"max_output_bytes"`
		// RunAs is the user programs run as when Silas is root ("" means
		// nobody; never root).
		RunAs string `yaml:"run_as"`
		// MaxProcesses bounds processes and threads of one execution.
		MaxProcesses int `yaml:"max_processes"`
		// MaxMemoryBytes bounds one execution's memory.
		MaxMemoryBytes int64 `yaml:"max_memory_bytes"`
		// MaxFileBytes is the largest file an execution may write.
		MaxFileBytes int64 `yaml:"max_file_bytes"`
		// MaxOpenFiles is per process.
		MaxOpenFiles int `yaml:"max_open_files"`
		// TmpBytes is the size of each execution's private /tmp.
		TmpBytes int64 `yaml:"tmp_bytes"`
		// MaxWorkBytes bounds what one execution writes to its work dir
		// (as root: ENOSPC past it).
		MaxWorkBytes int64 `yaml:"max_work_bytes"`
		// KeepWorkFor is how long a work dir is kept once its execution is
		// verified; 0 removes it then.
		KeepWorkFor Duration `yaml:"keep_work_for"`
		// MaxKeptWorkBytes bounds the kept work dirs together, oldest
		// removed first.
		MaxKeptWorkBytes int64 `yaml:"max_kept_work_bytes"`
		// NetworkPorts are the TCP ports an action granted network may
		// connect to.
		NetworkPorts []uint16 `yaml:"network_ports"`
		// NetworkDNS is the resolver (IPv4 address) network-on actions'
		// DNS queries are forwarded to; "" means the host's first
		// nameserver in /etc/resolv.conf.
		NetworkDNS string `yaml:"network_dns"`
	} `yaml:"sandbox"`
	// Output decides how much of an execution's output goes into chat.
	Output struct {
		// InlineMaxChars: longer output is stored and referenced instead of
		// pasted into chat.
		InlineMaxChars int `yaml:"inline_max_chars"`
		// PreviewChars of a stored output still show on the card.
		PreviewChars int `yaml:"preview_chars"`
	} `yaml:"output"`
	// Webchat is the local browser chat (docs/webchat-protocol.md), the
	// first channel: decoded straight into its adapter's Config like the
	// platform sections below.
	Webchat webchat.Config `yaml:"webchat"`
	// Secrets configures sealed credentials (docs/secrets.md).
	Secrets struct {
		// KeyFile is the data key file; "" means data_dir/keys/secrets.key.
		KeyFile string `yaml:"key_file"`
		// Key is the data key itself (base64, 32 bytes) or file:/path.
		Key string `yaml:"key"`
		// RequestTTL is how long a /secret link works.
		RequestTTL Duration `yaml:"request_ttl"`
	} `yaml:"secrets"`
	// SecretsWeb is the HTTPS form where credentials are typed.
	SecretsWeb struct {
		// Enabled serves the form; without it /secret is refused.
		Enabled bool `yaml:"enabled"`
		// Listen is the form's own address.
		Listen string `yaml:"listen"`
		// PublicURL is the https:// address links in chat point to.
		PublicURL string `yaml:"public_url"`
		// MaxValueBytes bounds one submitted value.
		MaxValueBytes int `yaml:"max_value_bytes"`
		// TLS is how the form gets its certificate.
		TLS struct {
			// Mode is self-signed (loopback only), files or acme.
			Mode string `yaml:"mode"`
			// CertFile and KeyFile are required in files mode.
			CertFile string `yaml:"cert_file"`
			KeyFile  string `yaml:"key_file"`
			// Dir holds the self-signed certificate or the ACME cache; ""
			// means data_dir/secrets-web.
			Dir string `yaml:"dir"`
			// ACMEEmail is the contact address given to the ACME CA.
			ACMEEmail string `yaml:"acme_email"`
			// SelfSignedListenAny lets self-signed mode listen on a wildcard
			// address (0.0.0.0:8443, [::]:8443): for a container whose port
			// is published on the host's loopback only (deploy/compose.yaml).
			// public_url must still be a loopback URL.
			SelfSignedListenAny bool `yaml:"self_signed_listen_any"`
		} `yaml:"tls"`
	} `yaml:"secrets_web"`
	// The platform channels: each section is decoded straight into its
	// adapter's own Config, which documents the keys, sets its defaults
	// and checks them (adapters/<platform>/config.go). Adapters finds them
	// by their type: a new platform is its folder and one line here.
	Telegram telegram.Config `yaml:"telegram"`
	Slack    slack.Config    `yaml:"slack"`
	Discord  discord.Config  `yaml:"discord"`
	WhatsApp whatsapp.Config `yaml:"whatsapp"`
	// Audit is the audit chain's signed checkpoints.
	Audit Audit `yaml:"audit"`
	// Policy is the risk policy every proposed action passes.
	Policy struct {
		// Rules are tried in order; the first that applies decides
		// (docs/policy.md). Empty: the built-in defaults.
		Rules []policy.Rule `yaml:"rules"`
	} `yaml:"policy"`
	// Agent and LLM choose and configure the agent (llm.go).
	Agent Agent `yaml:"agent"`
	LLM   LLM   `yaml:"llm"`
	// Flows are the runbooks (flows.*).
	Flows Flows `yaml:"flows"`
	// Consents configures standing approvals (consents.*).
	Consents Consents `yaml:"consents"`
	// MCP configures `silas mcp serve`, the stdio bridge to the gateway's
	// MCP endpoint (docs/mcp.md).
	MCP MCP `yaml:"mcp"`
	// Telemetry configures OpenTelemetry traces (telemetry.tracing.*).
	Telemetry Telemetry `yaml:"telemetry"`
	// Passkeys configures the passkey step-up of irreversible actions
	// (passkeys.*).
	Passkeys Passkeys `yaml:"passkeys"`
	// Cluster times the instances sharing the database (cluster.*).
	Cluster Cluster `yaml:"cluster"`

	// ignoredEnv are Kubernetes service-link variables Load skipped.
	ignoredEnv []string
}

// Audit configures the signed checkpoints of the audit chain
// (docs/operations.md). Empty paths have defaults under data_dir/audit.
type Audit struct {
	// KeyFile is the Ed25519 audit signing key (0600), kept apart from
	// data_dir/keys; created on first serve.
	KeyFile string `yaml:"key_file"`
	// PublicKeyFile holds the audit public key(s) verify trusts.
	PublicKeyFile string `yaml:"public_key_file"`
	// HeadFile receives every checkpoint, one JSON line each.
	HeadFile string `yaml:"head_file"`
	// CheckpointEntries: sign after this many new entries.
	CheckpointEntries int `yaml:"checkpoint_entries"`
	// CheckpointInterval: sign at least this often while entries arrive.
	CheckpointInterval Duration `yaml:"checkpoint_interval"`
}

// Default returns the built-in defaults (the example file's values; most
// of a platform's defaults are applied by its adapter itself).
func Default() *Config {
	c := &Config{DataDir: "./.data"}
	c.Database.AutoMigrate = true
	c.Audit.CheckpointEntries = 1000
	c.Audit.CheckpointInterval = Duration{time.Minute}
	c.HTTP.Listen = "127.0.0.1:8080"
	c.HTTP.ShutdownGrace = Duration{20 * time.Second}
	c.HTTP.ReadHeaderTimeout = Duration{10 * time.Second}
	c.HTTP.ReadTimeout = Duration{30 * time.Second}
	c.HTTP.WriteTimeout = Duration{60 * time.Second}
	c.HTTP.IdleTimeout = Duration{120 * time.Second}
	c.HTTP.MaxHeaderBytes = 65536
	c.HTTP.MaxConnections = 512
	c.HTTP.MaxConnectionsPerClient = 64
	c.Log.Level, c.Log.Format = "info", "text"
	c.Identities.Owners = []string{"webchat:local"}
	c.Approvals.TTL = Duration{5 * time.Minute}
	c.Approvals.TokenTTL = Duration{10 * time.Minute}
	c.Health.DeafAfter = Duration{10 * time.Minute}
	c.Sandbox.Timeout = Duration{60 * time.Second}
	c.Sandbox.MaxOutputBytes = 1 << 20
	c.Sandbox.MaxProcesses = 256
	c.Sandbox.MaxMemoryBytes = 1 << 30
	c.Sandbox.MaxFileBytes = 1 << 30
	c.Sandbox.MaxOpenFiles = 1024
	c.Sandbox.TmpBytes = 256 << 20
	c.Sandbox.MaxWorkBytes = 256 << 20
	c.Sandbox.KeepWorkFor = Duration{24 * time.Hour}
	c.Sandbox.MaxKeptWorkBytes = 512 << 20
	c.Sandbox.NetworkPorts = []uint16{53, 80, 443}
	c.Output.InlineMaxChars, c.Output.PreviewChars = 10000, 2000
	c.Secrets.RequestTTL = Duration{15 * time.Minute}
	c.Passkeys.StepUpTTL = Duration{5 * time.Minute}
	c.Passkeys.EnrollTTL = Duration{15 * time.Minute}
	c.SecretsWeb.Enabled = true
	c.SecretsWeb.Listen = "127.0.0.1:8443"
	c.SecretsWeb.PublicURL = "https://127.0.0.1:8443"
	c.SecretsWeb.MaxValueBytes = 16384
	c.SecretsWeb.TLS.Mode = "self-signed"
	for _, p := range c.platforms() {
		p.SetDefaults()
	}
	c.setLLMDefaults()
	c.Flows.MaxParallel = 4
	c.setConsentDefaults()
	c.setClusterDefaults()
	return c
}

// Load reads path (optional: "" means defaults only), applies environment
// overrides from env (os.Environ form), resolves file: secrets and validates.
func Load(path string, env []string) (*Config, error) {
	c := Default()
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if raw, err = prepareDurations(raw, reflect.TypeOf(*c)); err != nil {
			return nil, fmt.Errorf("config: %s: %w", path, err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		dec.KnownFields(true)
		if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("config: %s: %w", path, err)
		}
	}
	if err := applyEnv(c, env); err != nil {
		return nil, err
	}
	for _, u := range []struct {
		key string
		v   *string
	}{{"database.url", &c.Database.URL}, {"database.migrate_url", &c.Database.MigrateURL}} {
		if strings.HasPrefix(*u.v, "file:") {
			b, err := os.ReadFile(strings.TrimPrefix(*u.v, "file:"))
			if err != nil {
				return nil, fmt.Errorf("config: %s: %w", u.key, err)
			}
			*u.v = strings.TrimSpace(string(b))
		}
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// applyEnv maps SILAS_A_B to the key a.b (and DATABASE_URL to database.url).
func applyEnv(c *Config, env []string) error {
	vars := map[string]string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			vars[k] = v
		}
	}
	if v, ok := vars["DATABASE_URL"]; ok && v != "" {
		c.Database.URL = v
	}
	known := map[string]bool{}
	var walk func(v reflect.Value, prefix, key string) error
	walk = func(v reflect.Value, prefix, key string) error {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
			if tag == "" || tag == "-" {
				continue
			}
			name := prefix + "_" + strings.ToUpper(tag)
			k := tag
			if key != "" {
				k = key + "." + tag
			}
			fv := v.Field(i)
			if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(Duration{}) {
				if err := walk(fv, name, k); err != nil {
					return err
				}
				continue
			}
			known[name] = true
			val, ok := vars[name]
			if !ok {
				continue
			}
			if err := setScalar(fv, val); err != nil {
				return fmt.Errorf("config: %s (from %s): %w", k, name, err)
			}
		}
		return nil
	}
	if err := walk(reflect.ValueOf(c).Elem(), "SILAS", ""); err != nil {
		return err
	}
	for k, v := range vars {
		if !strings.HasPrefix(k, "SILAS_") || known[k] || ignoredEnv[k] {
			continue
		}
		if serviceLink(k, v) {
			c.ignoredEnv = append(c.ignoredEnv, k)
			continue
		}
		return fmt.Errorf("config: environment variable %s does not name a configuration key (see `silas config example`)", k)
	}
	slices.Sort(c.ignoredEnv)
	return nil
}

// IgnoredEnv lists the SILAS_* variables Load skipped because they are
// Kubernetes service links (serve logs them at debug level).
func (c *Config) IgnoredEnv() []string { return slices.Clone(c.ignoredEnv) }

// serviceLinkRe matches the names Kubernetes gives the variables it puts
// into every pod for every Service in the namespace (a Service named
// "silas" yields SILAS_SERVICE_HOST, SILAS_PORT, SILAS_PORT_8080_TCP…).
// Group 1 tells which kind, and so which value shape to expect.
var serviceLinkRe = regexp.MustCompile(`^[A-Z0-9_]+?_(SERVICE_HOST|SERVICE_PORT(?:_[A-Z0-9_]+)?|PORT|PORT_[0-9]{1,5}_(?:TCP|UDP|SCTP)(?:_PROTO|_PORT|_ADDR)?)$`)

// serviceLink reports whether name=value is a Kubernetes service link. The
// value must have the shape Kubernetes writes too (an IP, a port number,
// tcp://ip:port, a protocol), so that a mistyped key such as
// SILAS_SANDBOX_NETWORK_PORT=443 is still refused rather than skipped.
// Deployments should set enableServiceLinks: false (deploy/kubernetes);
// this keeps a Service named silas from crashing the pod when they don't.
func serviceLink(name, value string) bool {
	m := serviceLinkRe.FindStringSubmatch(name)
	if m == nil {
		return false
	}
	isPort := func(s string) bool {
		n, err := strconv.Atoi(s)
		return err == nil && n > 0 && n < 65536 && strconv.Itoa(n) == s
	}
	isIP := func(s string) bool { return net.ParseIP(s) != nil }
	isURL := func(s string) bool {
		proto, rest, ok := strings.Cut(s, "://")
		if !ok || (proto != "tcp" && proto != "udp" && proto != "sctp") {
			return false
		}
		host, port, err := net.SplitHostPort(rest)
		return err == nil && isIP(host) && isPort(port)
	}
	kind := m[1]
	switch {
	case kind == "SERVICE_HOST":
		return isIP(value)
	case strings.HasPrefix(kind, "SERVICE_PORT"):
		return isPort(value)
	case kind == "PORT":
		return isURL(value)
	case strings.HasSuffix(kind, "_PROTO"):
		return value == "tcp" || value == "udp" || value == "sctp"
	case strings.HasSuffix(kind, "_ADDR"):
		return isIP(value)
	case strings.HasSuffix(kind, "_TCP_PORT"), strings.HasSuffix(kind, "_UDP_PORT"), strings.HasSuffix(kind, "_SCTP_PORT"):
		return isPort(value)
	default: // PORT_<n>_<PROTO>
		return isURL(value)
	}
}

// ignoredEnv are SILAS_ variables that are not configuration keys.
var ignoredEnv = map[string]bool{"SILAS_CONFIG": true, "SILAS_FAILPOINT": true, "SILAS_CHROMIUM": true, "SILAS_REQUIRE_BROWSER": true, "SILAS_CI": true}

func setScalar(v reflect.Value, s string) error {
	switch v.Interface().(type) {
	case Duration, time.Duration:
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%q is not a duration like 30s or 5m", s)
		}
		if v.Type() == durationType {
			v.SetInt(int64(d))
		} else {
			v.Set(reflect.ValueOf(Duration{d}))
		}
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%q is not true or false", s)
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not a whole number", s)
		}
		v.SetInt(n)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint16 {
			var ports []uint16
			for _, p := range strings.Split(s, ",") {
				if p = strings.TrimSpace(p); p == "" {
					continue
				}
				n, err := strconv.ParseUint(p, 10, 16)
				if err != nil {
					return fmt.Errorf("%q is not a list of ports like 80,443", s)
				}
				ports = append(ports, uint16(n))
			}
			v.Set(reflect.ValueOf(ports))
			return nil
		}
		if v.Type().Elem().Kind() != reflect.String {
			return errors.New("cannot be set from the environment; use the config file")
		}
		var parts []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		v.Set(reflect.ValueOf(parts))
	default:
		return errors.New("cannot be set from the environment; use the config file")
	}
	return nil
}

// platform is a section of Config that is an adapter's own Config (the
// web chat's or a platform's): it sets its defaults and describes itself.
type platform interface {
	SetDefaults()
	Spec() spec.Spec
}

// platforms are Config's platform sections in field order. Finding them by
// their type rather than listing them keeps a new platform to its folder
// and its one field in Config.
func (c *Config) platforms() []platform {
	var out []platform
	v := reflect.ValueOf(c).Elem()
	for i := 0; i < v.NumField(); i++ {
		if !v.Type().Field(i).IsExported() {
			continue
		}
		if p, ok := v.Field(i).Addr().Interface().(platform); ok {
			out = append(out, p)
		}
	}
	return out
}

// Adapters lists the adapters — the web chat, then the platforms — in the
// order serve starts them and doctor reports them: Config's adapter
// fields, in order.
func (c *Config) Adapters() []spec.Spec {
	var out []spec.Spec
	for _, p := range c.platforms() {
		out = append(out, p.Spec())
	}
	return out
}

// Validate checks every key and names the first bad one: the gateway's own
// sections, then each adapter's (Adapters), the agent's and the policy.
func (c *Config) Validate() error {
	for _, check := range []func() error{c.checkStorage, c.checkHTTP, c.checkTrust, c.checkSandbox, c.checkWeb, c.checkFlows, c.checkConsents, c.checkMCP, c.checkTelemetry, c.checkCluster, c.checkPasskeys} {
		if err := check(); err != nil {
			return err
		}
	}
	for _, a := range c.Adapters() {
		if err := a.Check(); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	if err := c.validateLLM(); err != nil {
		return err
	}
	if _, err := policy.New(c.Policy.Rules); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// bad is a validation error naming the key.
func bad(key, format string, a ...any) error {
	return fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, a...))
}

// checkStorage checks the data directory, the database and the audit checkpoints.
func (c *Config) checkStorage() error {
	if strings.TrimSpace(c.DataDir) == "" {
		return bad("data_dir", "must not be empty")
	}
	if c.Database.URL != "" && !strings.HasPrefix(c.Database.URL, "postgres://") && !strings.HasPrefix(c.Database.URL, "postgresql://") && !strings.Contains(c.Database.URL, "=") {
		return bad("database.url", "must be a postgres:// URL or a key=value connection string")
	}
	if c.Database.MigrateURL != "" && !strings.HasPrefix(c.Database.MigrateURL, "postgres://") && !strings.HasPrefix(c.Database.MigrateURL, "postgresql://") && !strings.Contains(c.Database.MigrateURL, "=") {
		return bad("database.migrate_url", "must be a postgres:// URL or a key=value connection string")
	}
	if c.Audit.CheckpointEntries < 1 || c.Audit.CheckpointEntries > 10_000_000 {
		return bad("audit.checkpoint_entries", "%d must be between 1 and 10000000", c.Audit.CheckpointEntries)
	}
	if c.Audit.CheckpointInterval.Duration < time.Second || c.Audit.CheckpointInterval.Duration > 24*time.Hour {
		return bad("audit.checkpoint_interval", "%s must be between 1s and 24h", c.Audit.CheckpointInterval.Duration)
	}
	return nil
}

// checkHTTP checks the listeners and the log.
func (c *Config) checkHTTP() error {
	if _, port, ok := strings.Cut(c.HTTP.Listen, ":"); !ok || port == "" {
		return bad("http.listen", "%q must be host:port", c.HTTP.Listen)
	}
	if c.HTTP.ShutdownGrace.Duration < 0 {
		return bad("http.shutdown_grace", "must not be negative")
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"http.read_header_timeout", c.HTTP.ReadHeaderTimeout.Duration}, {"http.read_timeout", c.HTTP.ReadTimeout.Duration},
		{"http.write_timeout", c.HTTP.WriteTimeout.Duration}, {"http.idle_timeout", c.HTTP.IdleTimeout.Duration}} {
		if d.v < 100*time.Millisecond || d.v > time.Hour {
			return bad(d.key, "%s must be between 100ms and 1h", d.v)
		}
	}
	if c.HTTP.MaxHeaderBytes < 4096 || c.HTTP.MaxHeaderBytes > 1<<20 {
		return bad("http.max_header_bytes", "%d must be between 4096 and 1048576", c.HTTP.MaxHeaderBytes)
	}
	if c.HTTP.MaxConnections < 1 || c.HTTP.MaxConnections > 100000 {
		return bad("http.max_connections", "%d must be between 1 and 100000", c.HTTP.MaxConnections)
	}
	if c.HTTP.MaxConnectionsPerClient < 1 || c.HTTP.MaxConnectionsPerClient > 100000 {
		return bad("http.max_connections_per_client", "%d must be between 1 and 100000", c.HTTP.MaxConnectionsPerClient)
	}
	for _, h := range c.HTTP.AllowedHosts {
		if h == "" || strings.ContainsAny(h, "/ ") {
			return bad("http.allowed_hosts", "%q must be a host name or host:port", h)
		}
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return bad("log.level", "%q is not debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		return bad("log.format", "%q is not text or json", c.Log.Format)
	}
	return nil
}

// checkTrust checks the declared identities and the approvals' lifetimes.
func (c *Config) checkTrust() error {
	for i, id := range c.Identities.Owners {
		if p, u, ok := strings.Cut(id, ":"); !ok || p == "" || u == "" {
			return bad(fmt.Sprintf("identities.owners[%d]", i), "%q must be platform:id, e.g. telegram:123456", id)
		}
	}
	for i, id := range c.Identities.Allowed {
		if p, u, ok := strings.Cut(id, ":"); !ok || p == "" || u == "" {
			return bad(fmt.Sprintf("identities.allowed[%d]", i), "%q must be platform:id", id)
		}
	}
	if c.Approvals.TTL.Duration < 10*time.Second || c.Approvals.TTL.Duration > 7*24*time.Hour {
		return bad("approvals.ttl", "%s must be between 10s and 168h", c.Approvals.TTL.Duration)
	}
	if c.Approvals.TokenTTL.Duration < 10*time.Second || c.Approvals.TokenTTL.Duration > 24*time.Hour {
		return bad("approvals.token_ttl", "%s must be between 10s and 24h", c.Approvals.TokenTTL.Duration)
	}
	for i, to := range c.Approvals.RouteTo {
		p, u, ok := strings.Cut(to, ":")
		if to == "" || ok && (p == "" || u == "") {
			return bad(fmt.Sprintf("approvals.route_to[%d]", i), "%q must be an identity (platform:id) or a channel name", to)
		}
	}
	if d := c.Health.DeafAfter.Duration; d != 0 && (d < 30*time.Second || d > 24*time.Hour) {
		return bad("health.deaf_after", "%s must be 0 (off) or between 30s and 24h", d)
	}
	for i, r := range c.Approvals.SelfApprovalRisks {
		if !cards.Risk(r).Valid() {
			return bad(fmt.Sprintf("approvals.self_approval_risks[%d]", i), "%q is not low, medium, high or irreversible", r)
		}
	}
	return nil
}

// NoSelfApproval lists the risks for which a requester may not approve
// their own request (approvals.self_approval: false); nil: they may.
func (c *Config) NoSelfApproval() []cards.Risk {
	if c.Approvals.SelfApproval == nil || *c.Approvals.SelfApproval {
		return nil
	}
	if len(c.Approvals.SelfApprovalRisks) == 0 {
		return []cards.Risk{cards.RiskLow, cards.RiskMedium, cards.RiskHigh, cards.RiskIrreversible}
	}
	out := make([]cards.Risk, len(c.Approvals.SelfApprovalRisks))
	for i, r := range c.Approvals.SelfApprovalRisks {
		out[i] = cards.Risk(r)
	}
	return out
}

// checkSandbox checks the sandbox's limits and how much output reaches chat.
func (c *Config) checkSandbox() error {
	if c.Sandbox.Timeout.Duration < time.Second || c.Sandbox.Timeout.Duration > 24*time.Hour {
		return bad("sandbox.timeout", "%s must be between 1s and 24h", c.Sandbox.Timeout.Duration)
	}
	if c.Sandbox.MaxOutputBytes < 1024 || c.Sandbox.MaxOutputBytes > 64<<20 {
		return bad("sandbox.max_output_bytes", "%d must be between 1024 and 67108864", c.Sandbox.MaxOutputBytes)
	}
	if c.Sandbox.RunAs == "root" || c.Sandbox.RunAs == "0" {
		return bad("sandbox.run_as", "%q: programs must run as an unprivileged user", c.Sandbox.RunAs)
	}
	if c.Sandbox.MaxProcesses < 8 || c.Sandbox.MaxProcesses > 65536 {
		return bad("sandbox.max_processes", "%d must be between 8 and 65536", c.Sandbox.MaxProcesses)
	}
	if c.Sandbox.MaxMemoryBytes < 16<<20 {
		return bad("sandbox.max_memory_bytes", "%d must be at least 16777216 (16 MiB)", c.Sandbox.MaxMemoryBytes)
	}
	if c.Sandbox.MaxFileBytes < 1<<20 {
		return bad("sandbox.max_file_bytes", "%d must be at least 1048576 (1 MiB)", c.Sandbox.MaxFileBytes)
	}
	if c.Sandbox.MaxOpenFiles < 16 || c.Sandbox.MaxOpenFiles > 1<<20 {
		return bad("sandbox.max_open_files", "%d must be between 16 and 1048576", c.Sandbox.MaxOpenFiles)
	}
	if c.Sandbox.TmpBytes < 1<<20 {
		return bad("sandbox.tmp_bytes", "%d must be at least 1048576 (1 MiB)", c.Sandbox.TmpBytes)
	}
	if c.Sandbox.MaxWorkBytes < 1<<20 {
		return bad("sandbox.max_work_bytes", "%d must be at least 1048576 (1 MiB)", c.Sandbox.MaxWorkBytes)
	}
	if c.Sandbox.KeepWorkFor.Duration < 0 {
		return bad("sandbox.keep_work_for", "%s must not be negative (0 removes a work dir once its execution is verified)", c.Sandbox.KeepWorkFor.Duration)
	}
	if c.Sandbox.MaxKeptWorkBytes < 0 {
		return bad("sandbox.max_kept_work_bytes", "%d must not be negative", c.Sandbox.MaxKeptWorkBytes)
	}
	for _, p := range c.Sandbox.NetworkPorts {
		if p == 0 {
			return bad("sandbox.network_ports", "port 0 is not a port")
		}
	}
	if d := c.Sandbox.NetworkDNS; d != "" {
		if ip, err := netip.ParseAddr(d); err != nil || !ip.Is4() {
			return bad("sandbox.network_dns", "%q is not an IPv4 address (a resolver network-on actions' DNS is forwarded to; empty for the host's)", d)
		}
	}
	if c.Output.InlineMaxChars < 100 {
		return bad("output.inline_max_chars", "%d must be at least 100", c.Output.InlineMaxChars)
	}
	if c.Output.PreviewChars < 1 || c.Output.PreviewChars > c.Output.InlineMaxChars {
		return bad("output.preview_chars", "%d must be between 1 and output.inline_max_chars", c.Output.PreviewChars)
	}
	return nil
}

// checkWeb checks the secure form for credentials (the web chat checks its
// own section, like every adapter).
func (c *Config) checkWeb() error {
	if c.Secrets.RequestTTL.Duration < time.Minute || c.Secrets.RequestTTL.Duration > 24*time.Hour {
		return bad("secrets.request_ttl", "%s must be between 1m and 24h", c.Secrets.RequestTTL.Duration)
	}
	if c.SecretsWeb.Enabled {
		switch c.SecretsWeb.TLS.Mode {
		case "self-signed", "files", "acme":
		default:
			return bad("secrets_web.tls.mode", "%q is not self-signed, files or acme", c.SecretsWeb.TLS.Mode)
		}
		if c.SecretsWeb.TLS.Mode == "files" && (c.SecretsWeb.TLS.CertFile == "" || c.SecretsWeb.TLS.KeyFile == "") {
			return bad("secrets_web.tls.cert_file", "cert_file and key_file are required when tls.mode is files")
		}
		if !strings.HasPrefix(c.SecretsWeb.PublicURL, "https://") {
			return bad("secrets_web.public_url", "%q must be an https:// URL: the form is served over HTTPS only", c.SecretsWeb.PublicURL)
		}
		if c.SecretsWeb.TLS.SelfSignedListenAny && c.SecretsWeb.TLS.Mode != "self-signed" {
			return bad("secrets_web.tls.self_signed_listen_any", "applies to tls.mode self-signed only, not %q (files and acme may listen anywhere)", c.SecretsWeb.TLS.Mode)
		}
		if c.SecretsWeb.TLS.SelfSignedListenAny {
			// The opt-in widens where the form listens, never who it is for:
			// browsers still reach it through a loopback URL.
			u, err := url.Parse(c.SecretsWeb.PublicURL)
			if err != nil || !httpserve.IsLoopback(u.Hostname()) {
				return bad("secrets_web.public_url", "%q must be a loopback URL (https://127.0.0.1:8443) with tls.self_signed_listen_any", c.SecretsWeb.PublicURL)
			}
		}
		if c.SecretsWeb.MaxValueBytes < 64 || c.SecretsWeb.MaxValueBytes > 1<<20 {
			return bad("secrets_web.max_value_bytes", "%d must be between 64 and 1048576", c.SecretsWeb.MaxValueBytes)
		}
	}
	return nil
}
