package config

import (
	"strings"
	"testing"
)

func TestSlackKeys(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		key  string // "" = valid
	}{
		{"disabled by default", nil, ""},
		{"socket", []string{"SILAS_SLACK_ENABLED=true", "SILAS_SLACK_BOT_TOKEN=file:/run/bot", "SILAS_SLACK_APP_TOKEN=file:/run/app"}, ""},
		{"http", []string{"SILAS_SLACK_ENABLED=true", "SILAS_SLACK_MODE=http", "SILAS_SLACK_BOT_TOKEN=file:/b", "SILAS_SLACK_SIGNING_SECRET=file:/s"}, ""},
		{"no bot token", []string{"SILAS_SLACK_ENABLED=true", "SILAS_SLACK_APP_TOKEN=x"}, "slack.bot_token"},
		{"socket without app token", []string{"SILAS_SLACK_ENABLED=true", "SILAS_SLACK_BOT_TOKEN=x"}, "slack.app_token"},
		{"http without signing secret", []string{"SILAS_SLACK_ENABLED=true", "SILAS_SLACK_MODE=http", "SILAS_SLACK_BOT_TOKEN=x"}, "slack.signing_secret"},
		{"bad mode", []string{"SILAS_SLACK_MODE=webhook"}, "slack.mode"},
		{"bad dm policy", []string{"SILAS_SLACK_DM_POLICY=everyone"}, "slack.dm_policy"},
		{"zero interval", []string{"SILAS_SLACK_LIMITS_PER_CHANNEL_INTERVAL=0s"}, "slack.limits.per_channel_interval"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load("", tc.env)
			if tc.key == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.Slack.DMPolicy != "pairing" {
					t.Errorf("dm_policy default = %q", c.Slack.DMPolicy)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.key+":") {
				t.Fatalf("error %v; want one naming %s", err, tc.key)
			}
		})
	}
}
