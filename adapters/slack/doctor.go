package slack

import (
	"context"
	"fmt"
	"github.com/silas-gateway/silas/internal/doctor"
	"slices"
	"strings"
)

// Severity and Finding are the shape every doctor shares (internal/doctor).
type (
	Severity = doctor.Severity
	Finding  = doctor.Finding
)

// Severities, from fine to broken.
const (
	SeverityOK    = doctor.OK
	SeverityInfo  = doctor.Info
	SeverityWarn  = doctor.Warn
	SeverityError = doctor.Error
)

// RequiredScopes are the bot token scopes the manifest in docs/slack.md
// grants and Silas needs.
var RequiredScopes = []string{"app_mentions:read", "chat:write", "commands", "im:history", "channels:history"}

// RecommendedScopes make private channels, group DMs and DMs to owners
// work.
var RecommendedScopes = []string{"groups:history", "mpim:history", "im:write"}

// Doctor checks the configuration, the bot token (auth.test, with the
// scopes Slack reports for it) and, in socket mode, the app token
// (apps.connections.open, whose URL is not dialled). It never includes a
// token or the signing secret in a finding and changes nothing on Slack's
// side.
func Doctor(ctx context.Context, cfg Config) []Finding {
	var out []Finding
	add := func(s Severity, check, format string, a ...any) {
		out = append(out, Finding{Severity: s, Check: check, Message: fmt.Sprintf(format, a...)})
	}
	a, err := New(cfg)
	if err != nil {
		add(SeverityError, "config", "%v", err)
		return out
	}
	r := a.cfg
	add(SeverityOK, "config", "slack settings are valid (mode %s, Web API %s)", r.Mode, r.BaseURL)
	cctx, cancel := context.WithTimeout(ctx, r.HTTPTimeout)
	res, err := a.api.AuthTestContext(cctx)
	cancel()
	switch {
	case err != nil && isAuthError(err):
		add(SeverityError, "bot_token", "Slack rejected the bot token (%s). Copy the Bot User OAuth Token (xoxb-…) from OAuth & Permissions and set slack.bot_token.", slackErr(err))
		return out
	case err != nil:
		add(SeverityError, "bot_token", "could not reach the Web API at %s: %v. Check the network, a proxy, or slack.base_url.", r.BaseURL, mapError("auth.test", err))
		return out
	}
	add(SeverityOK, "bot_token", "the token belongs to bot user %s in workspace %s (%s)", res.UserID, res.Team, res.TeamID)
	if r.TeamID != "" && r.TeamID != res.TeamID {
		add(SeverityError, "team_id", "slack.team_id is %s but the bot token belongs to workspace %s: every event would be refused. Correct or remove the key.", r.TeamID, res.TeamID)
	}
	if res.Header != nil {
		var have []string
		for _, s := range strings.Split(res.Header.Get("X-OAuth-Scopes"), ",") {
			if s = strings.TrimSpace(s); s != "" {
				have = append(have, s)
			}
		}
		var missing, missingRec []string
		for _, s := range RequiredScopes {
			if !slices.Contains(have, s) {
				missing = append(missing, s)
			}
		}
		for _, s := range RecommendedScopes {
			if !slices.Contains(have, s) {
				missingRec = append(missingRec, s)
			}
		}
		switch {
		case len(have) == 0:
			add(SeverityInfo, "scopes", "Slack did not report the token's scopes")
		case len(missing) > 0:
			add(SeverityError, "scopes", "the bot token lacks the scopes %s. Add them (or re-create the app from the manifest in docs/slack.md) and reinstall the app.", strings.Join(missing, ", "))
		default:
			add(SeverityOK, "scopes", "the bot token has every required scope")
		}
		if len(have) > 0 && len(missingRec) > 0 {
			add(SeverityInfo, "scopes", "optional scopes missing: %s (private channels, group DMs, direct messages to owners)", strings.Join(missingRec, ", "))
		}
	}
	if r.Mode == ModeSocket {
		cctx, cancel := context.WithTimeout(ctx, r.HTTPTimeout)
		_, err := a.openConnection(cctx)
		cancel()
		switch {
		case err != nil && isAuthError(err):
			add(SeverityError, "app_token", "Slack rejected the app token (%s). Create an app-level token with connections:write under Basic Information → App-Level Tokens and set slack.app_token.", slackErr(err))
		case err != nil:
			add(SeverityError, "app_token", "apps.connections.open failed: %v. Is Socket Mode enabled for the app?", err)
		default:
			add(SeverityOK, "app_token", "the app token opens Socket Mode connections")
		}
	} else {
		add(SeverityInfo, "http", "http mode: Slack must reach %s, %s and %s on http.listen through your HTTPS proxy", PathEvents, PathInteractions, PathCommands)
	}
	return out
}
