package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/config"
	"github.com/silas-gateway/silas/internal/doctor"
)

// cmdDoctor checks the settings an operator most often gets wrong and says
// what to do about them in plain words. It changes nothing. The platform
// checks themselves live in the adapters (each spec's Doctor); this only
// gathers the settings and prints the findings.
func cmdDoctor(ctx context.Context, env *cliEnv, args []string) error {
	fs := flags(env, "doctor", "doctor [--telegram-token file:PATH] [--telegram-mode polling|webhook] [--timeout 15s]",
		"Check the database role (warns when the gateway's role is a superuser or can change audit_log), the\n"+
			"audit key, the sandbox's isolation (what is in force, or what is missing), inbound events quarantined\n"+
			"at intake (dead letters), the Telegram bot token (getMe) and webhook status (getWebhookInfo) against\n"+
			"the configuration, the model endpoint, its models and tool calling (agent.kind: llm), and report problems in plain words. Nothing is changed on Telegram's side. Flags override the\n"+
			"telegram.* configuration keys, so a token can be checked before it goes into the config.\n"+
			"Exit status 1 when a problem was found.")
	token := fs.String("telegram-token", "", "bot token, or file:/path to read it from (prefer file: — flags end up in shell history)")
	mode := fs.String("telegram-mode", "", "polling or webhook (telegram.mode)")
	webhookURL := fs.String("telegram-webhook-url", "", "public webhook URL (telegram.webhook_url)")
	secret := fs.String("telegram-webhook-secret", "", "webhook secret, or file:/path (telegram.webhook_secret)")
	baseURL := fs.String("telegram-base-url", "", "Bot API server (telegram.base_url)")
	username := fs.String("telegram-bot-username", "", "expected bot username (telegram.bot_username)")
	timeout := fs.Duration("timeout", 15*time.Second, "timeout of each Bot API request")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(env)
	if err != nil {
		return err
	}
	problems := 0
	for _, b := range []struct {
		title string
		run   func() []doctor.Finding
	}{
		{"Database and audit", func() []doctor.Finding { return doctorDatabase(ctx, cfg) }},
		{"Sandbox", func() []doctor.Finding { return doctorSandbox(cfg, env.configPath) }},
		{"Intake", func() []doctor.Finding { return doctorDeadLetters(ctx, env, cfg) }},
		{"Channel health", func() []doctor.Finding { return doctorHealth(ctx, env, cfg) }},
		{"Tracing", func() []doctor.Finding { return doctorTracing(ctx, env, cfg) }},
	} {
		problems += doctor.Block(env.stdout, b.title, b.run)
	}
	if f := doctorPasskeys(ctx, env, cfg); f != nil {
		problems += doctor.Block(env.stdout, "Passkeys", func() []doctor.Finding { return f })
	}
	if f := doctorSecureForm(cfg); f != nil {
		problems += doctor.Block(env.stdout, "Secure form", func() []doctor.Finding { return f })
	}
	problems += doctorLLM(ctx, cfg, env.stdout, *timeout)
	if len(cfg.MCP.Servers) > 0 {
		problems += doctor.Block(env.stdout, "MCP servers", func() []doctor.Finding { return doctorMCP(ctx, env, cfg, *timeout) })
	}
	// The --telegram-* flags override the telegram.* keys, so that a token
	// can be checked before it goes into the config.
	tc := &cfg.Telegram
	for _, o := range []struct {
		dst *string
		v   string
	}{{&tc.Token, *token}, {&tc.Mode, *mode}, {&tc.WebhookURL, *webhookURL}, {&tc.WebhookSecret, *secret}, {&tc.BaseURL, *baseURL}, {&tc.BotUsername, *username}} {
		if o.v != "" {
			*o.dst = o.v
		}
	}
	tc.HTTPTimeout = *timeout
	problems += doctorAdapters(ctx, env, cfg)
	if problems > 0 {
		return &exitError{code: 1, msg: fmt.Sprintf("silas doctor: %d problem(s) found", problems)}
	}
	return nil
}

// doctorSecureForm warns when the self-signed secure form may listen on a
// wildcard address (secrets_web.tls.self_signed_listen_any): that is safe
// only while its port is published on the host's loopback alone, which
// doctor cannot see from inside a container. Nil when the opt-in is off.
func doctorSecureForm(cfg *config.Config) []doctor.Finding {
	sw := cfg.SecretsWeb
	if !sw.Enabled || sw.TLS.Mode != "self-signed" || !sw.TLS.SelfSignedListenAny {
		return nil
	}
	return []doctor.Finding{{Severity: doctor.Warn, Check: "listen", Message: fmt.Sprintf(
		"self-signed form listens on %s (secrets_web.tls.self_signed_listen_any): publish its port on the host's loopback only "+
			"(compose: \"127.0.0.1:8443:8443\"), never on a network address; public_url %s must be how the host reaches it",
		sw.Listen, sw.PublicURL)}}
}

// doctorDeadLetters lists the inbound events quarantined at intake (the
// dead_letters table): how many, and the newest few. It reads the database
// only when one is configured (database.url) or the local cluster exists,
// so doctor never creates a database.
func doctorDeadLetters(ctx context.Context, env *cliEnv, cfg *config.Config) []doctor.Finding {
	if cfg.Database.URL == "" {
		if _, err := os.Stat(filepath.Join(cfg.DataDir, "pg")); err != nil {
			return doctor.Skipped("no database configured: dead letters not checked")
		}
	}
	var out []doctor.Finding
	err := withStore(ctx, env, func(st *store.Store) error {
		n, list, err := st.DeadLetters(ctx, 5)
		if err != nil {
			return err
		}
		if n == 0 {
			out = append(out, doctor.Finding{Severity: doctor.OK, Check: "dead letters", Message: "none: every inbound event was delivered"})
			return nil
		}
		f := doctor.Finding{Severity: doctor.Warn, Check: "dead letters", Message: fmt.Sprintf(
			"%d inbound event(s) quarantined (kept in the dead_letters table, audited as intake.quarantined); newest:", n)}
		for _, d := range list {
			msg := []rune(d.Error)
			if len(msg) > 120 {
				msg = append(msg[:119], '…')
			}
			f.Details = append(f.Details, fmt.Sprintf("#%d %s %s %s ×%d: %s", d.ID, d.LastSeen.Local().Format("2006-01-02 15:04:05"),
				d.Channel, strconv.Quote(d.EventID), d.Attempts, strconv.Quote(string(msg))))
		}
		out = append(out, f)
		return nil
	})
	if err != nil {
		return []doctor.Finding{{Severity: doctor.Error, Check: "dead letters", Message: err.Error()}}
	}
	return out
}
