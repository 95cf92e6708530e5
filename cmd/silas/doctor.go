package main

import (
	"context"
	"fmt"
	"time"

	"github.com/silas-gateway/silas/adapters/telegram"
	"github.com/silas-gateway/silas/internal/config"
)

// cmdDoctor checks the settings an operator most often gets wrong and says
// what to do about them in plain words. It changes nothing. Register it in
// the command table as
//
//	{"doctor", "check platform settings (Telegram token and webhook)", cmdDoctor},
//
// The checks themselves live in the adapters (telegram.Doctor); this only
// gathers the settings and prints the findings.
func cmdDoctor(ctx context.Context, env *cliEnv, args []string) error {
	fs := flags(env, "doctor", "doctor [--telegram-token file:PATH] [--telegram-mode polling|webhook] [--timeout 15s]",
		"Check the database role (warns when the gateway's role is a superuser or can change audit_log), the\n"+
			"audit key, the Telegram bot token (getMe) and webhook status (getWebhookInfo) against the configuration\n"+
			"and report problems in plain words. Nothing is changed on Telegram's side. Flags override the\n"+
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
	tc := telegramSettings(cfg)
	for _, o := range []struct {
		dst *string
		v   string
	}{{&tc.Token, *token}, {&tc.Mode, *mode}, {&tc.WebhookURL, *webhookURL}, {&tc.WebhookSecret, *secret}, {&tc.BaseURL, *baseURL}, {&tc.BotUsername, *username}} {
		if o.v != "" {
			*o.dst = o.v
		}
	}
	tc.HTTPTimeout = *timeout

	fmt.Fprintln(env.stdout, "Telegram")
	if tc.Token == "" {
		fmt.Fprintln(env.stdout, "  · not configured (no telegram.token): skipped")
	}
	for _, f := range telegramFindings(ctx, tc) {
		mark := map[telegram.Severity]string{telegram.SeverityOK: "✓", telegram.SeverityInfo: "·", telegram.SeverityWarn: "!", telegram.SeverityError: "✗"}[f.Severity]
		fmt.Fprintf(env.stdout, "  %s %-12s %s\n", mark, f.Check, f.Message)
		if f.Severity == telegram.SeverityError {
			problems++
		}
	}
	if problems > 0 {
		return &exitError{code: 1, msg: fmt.Sprintf("silas doctor: %d problem(s) found", problems)}
	}
	return nil
}

// telegramSettings maps the telegram.* configuration keys to the adapter's
// config. Until internal/config has a telegram section it returns none, and
// doctor relies on its --telegram-* flags.
//
// Once config.Config has the section (see docs/telegram.md for the keys),
// this becomes the same mapping serve uses, e.g.
//
//	t := cfg.Telegram
//	return telegram.Config{Token: t.Token, Mode: t.Mode, WebhookURL: t.WebhookURL, …}
func telegramSettings(cfg *config.Config) telegram.Config {
	return telegramConfig(cfg, nil, nil)
}

// telegramFindings runs the Telegram checks when a token is configured.
func telegramFindings(ctx context.Context, tc telegram.Config) []telegram.Finding {
	if tc.Token == "" {
		return nil
	}
	return telegram.Doctor(ctx, tc)
}
