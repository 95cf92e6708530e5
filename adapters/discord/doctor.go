package discord

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/bwmarrin/discordgo"

	"github.com/silas-gateway/silas/internal/doctor"
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

// Doctor checks the configuration against Discord: the token (GET
// /users/@me), the application (GET /applications/@me: id, intents,
// interactions endpoint), the gateway (GET /gateway/bot) and the
// registered commands. It changes nothing on Discord's side.
func Doctor(ctx context.Context, cfg Config) []Finding {
	a, err := New(cfg)
	if err != nil {
		return []Finding{{Severity: SeverityError, Check: "config", Message: err.Error()}}
	}
	var out []Finding
	add := func(s Severity, check, format string, args ...any) {
		out = append(out, Finding{Severity: s, Check: check, Message: fmt.Sprintf(format, args...)})
	}
	if !realTokenRe.MatchString(a.cfg.token) && a.cfg.BaseURL == DefaultBaseURL {
		add(SeverityWarn, "token", "does not have the shape of a Discord bot token (three dot-separated parts)")
	}
	me, err := a.rest.User("@me", discordgo.WithContext(ctx))
	if err != nil {
		// Without a working token nothing else can be read; the invite
		// URL needs only the application id, so it is still printed.
		add(SeverityError, "token", "%s", tokenProblem(a.cfg.BaseURL, err))
		add(SeverityInfo, "invite", "%s", InviteURL(a.cfg.ApplicationID))
		return out
	}
	if !me.Bot {
		add(SeverityError, "token", "the token belongs to a user account, not a bot")
	} else {
		add(SeverityOK, "token", "bot %s (id %s)", me.Username, me.ID)
	}
	app, err := a.rest.Application("@me")
	switch {
	case err != nil:
		add(SeverityWarn, "application", "could not read the application (%v)", mapError("GET /applications/@me", err))
	case app.ID != a.cfg.ApplicationID:
		add(SeverityError, "application", "discord.application_id is %s but the token's application is %s", a.cfg.ApplicationID, app.ID)
	default:
		add(SeverityOK, "application", "%s (id %s)", app.Name, app.ID)
		if a.cfg.Mode == ModeHTTP {
			add(SeverityInfo, "interactions", "http mode: the application's Interactions Endpoint URL must be https://<your host>%s", InteractionsPath)
		}
	}
	if a.cfg.Mode == ModeGateway {
		gb, err := a.rest.GatewayBot(discordgo.WithContext(ctx))
		if err != nil {
			add(SeverityError, "gateway", "GET /gateway/bot failed (%v)", mapError("gateway", err))
		} else {
			add(SeverityOK, "gateway", "%s (%d identifies left today)", gb.URL, gb.SessionStartLimit.Remaining)
		}
		add(SeverityInfo, "intents", "Silas asks for Guilds, Guild Messages and Direct Messages; Message Content is not needed (DMs and mentions carry content)")
	}
	have, err := a.rest.ApplicationCommands(a.cfg.ApplicationID, "", discordgo.WithContext(ctx))
	want := Commands()
	switch {
	case err != nil:
		add(SeverityWarn, "commands", "could not list the application commands (%v)", mapError("commands", err))
	case commandsEqual(have, want):
		var names []string
		for _, c := range want {
			names = append(names, "/"+c.Name)
		}
		add(SeverityOK, "commands", "%s are registered", strings.Join(names, ", "))
	default:
		add(SeverityInfo, "commands", "the slash commands differ from Silas's; `silas serve` registers them at start")
	}
	add(SeverityInfo, "invite", "%s", InviteURL(a.cfg.ApplicationID))
	return out
}

// tokenProblem says why GET /users/@me failed in the operator's terms:
// only a 401 means Discord refused the token; another HTTP status is
// Discord's answer to something else, and no answer at all is the network
// (DNS, a proxy, a firewall, missing CA certificates), where resetting the
// token would help nothing.
func tokenProblem(base string, err error) string {
	var re *discordgo.RESTError
	if !errors.As(err, &re) || re.Response == nil {
		return fmt.Sprintf("cannot reach Discord at %s (%v): check the network, a proxy and the CA certificates (docs/deploy.md); the token was not checked",
			base, mapError("GET /users/@me", err))
	}
	if re.Response.StatusCode == http.StatusUnauthorized {
		return fmt.Sprintf("Discord refused the token (%v): copy it again from Bot → Reset Token", mapError("GET /users/@me", err))
	}
	return fmt.Sprintf("Discord answered GET /users/@me with HTTP %d (%v); the token was not checked", re.Response.StatusCode, mapError("GET /users/@me", err))
}

// Permissions the bot needs in guild channels: View Channel, Send
// Messages, Embed Links, Read Message History (catch-up) and Manage
// Messages (to delete a message that pasted a credential).
const Permissions = discordgo.PermissionViewChannel | discordgo.PermissionSendMessages | discordgo.PermissionEmbedLinks |
	discordgo.PermissionReadMessageHistory | discordgo.PermissionManageMessages

// InviteURL is the OAuth2 URL that adds the bot to a guild with the scopes
// bot and applications.commands and the minimal permissions.
func InviteURL(appID string) string {
	return fmt.Sprintf("https://discord.com/oauth2/authorize?client_id=%s&scope=bot+applications.commands&permissions=%d", appID, Permissions)
}
