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
	problems := doctorDatabase(ctx, env, cfg)
	if doctorSandbox(cfg, env.configPath, env.stdout) {
		problems++
	}
	if err := doctorDeadLetters(ctx, env, cfg); err != nil {
		return err
	}
	problems += doctorLLM(ctx, cfg, env.stdout, *timeout)
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

// doctorDeadLetters lists the inbound events quarantined at intake (the
// dead_letters table): how many, and the newest few. It reads the database
// only when one is configured (database.url) or the local cluster exists,
// so doctor never creates a database.
func doctorDeadLetters(ctx context.Context, env *cliEnv, cfg *config.Config) error {
	fmt.Fprintln(env.stdout, "Intake")
	if cfg.Database.URL == "" {
		if _, err := os.Stat(filepath.Join(cfg.DataDir, "pg")); err != nil {
			fmt.Fprintln(env.stdout, "  · no database configured: dead letters not checked")
			return nil
		}
	}
	return withStore(ctx, env, func(st *store.Store) error {
		n, list, err := st.DeadLetters(ctx, 5)
		if err != nil {
			return err
		}
		if n == 0 {
			fmt.Fprintln(env.stdout, "  ✓ dead letters  none: every inbound event was delivered")
			return nil
		}
		fmt.Fprintf(env.stdout, "  ! dead letters  %d inbound event(s) quarantined (kept in the dead_letters table, audited as intake.quarantined); newest:\n", n)
		for _, d := range list {
			msg := []rune(d.Error)
			if len(msg) > 120 {
				msg = append(msg[:119], '…')
			}
			fmt.Fprintf(env.stdout, "      #%d %s %s %s ×%d: %s\n", d.ID, d.LastSeen.Local().Format("2006-01-02 15:04:05"),
				d.Channel, strconv.Quote(d.EventID), d.Attempts, strconv.Quote(string(msg)))
		}
		return nil
	})
}
