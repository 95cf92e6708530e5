package slack

import (
	"context"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/adapters/slack/slacktest"
)

func TestDoctor(t *testing.T) {
	t.Parallel()
	srv := slacktest.NewServer(t, slacktest.Options{})
	tests := []struct {
		name  string
		cfg   Config
		check string
		sev   Severity
		want  string
	}{
		{"tokens work", Config{BotToken: slacktest.BotToken, AppToken: slacktest.AppToken, BaseURL: srv.URL}, "app_token", SeverityOK, "opens Socket Mode"},
		{"scopes", Config{BotToken: slacktest.BotToken, AppToken: slacktest.AppToken, BaseURL: srv.URL}, "scopes", SeverityOK, "every required scope"},
		{"bot token", Config{BotToken: slacktest.BotToken, AppToken: slacktest.AppToken, BaseURL: srv.URL}, "bot_token", SeverityOK, "U0SILAS"},
		{"wrong bot token", Config{BotToken: "xoxb-0000-wrong-token", AppToken: slacktest.AppToken, BaseURL: srv.URL}, "bot_token", SeverityError, "invalid_auth"},
		{"wrong app token", Config{BotToken: slacktest.BotToken, AppToken: "xapp-1-wrong-token", BaseURL: srv.URL}, "app_token", SeverityError, "invalid_auth"},
		{"other workspace", Config{BotToken: slacktest.BotToken, AppToken: slacktest.AppToken, BaseURL: srv.URL, TeamID: "T0OTHER"}, "team_id", SeverityError, "T0OTHER"},
		{"bad config", Config{BotToken: slacktest.BotToken}, "config", SeverityError, "slack.app_token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := Doctor(context.Background(), tc.cfg)
			for _, f := range fs {
				if strings.Contains(f.Message, slacktest.BotToken) || strings.Contains(f.Message, slacktest.AppToken) {
					t.Fatalf("finding shows a token: %s", f.Message)
				}
				if f.Check == tc.check && f.Severity == tc.sev && strings.Contains(f.Message, tc.want) {
					return
				}
			}
			t.Fatalf("no %s finding %q on %s: %+v", tc.sev, tc.want, tc.check, fs)
		})
	}
}
