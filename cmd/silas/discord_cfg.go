package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/silas-gateway/silas/adapters/discord"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/internal/config"
)

// discordConfig maps the discord.* keys onto the adapter's config; file:
// values pass through (the adapter reads them itself).
func discordConfig(cfg *config.Config, state core.StateStore, log *slog.Logger) discord.Config {
	d := cfg.Discord
	return discord.Config{Token: d.Token, ApplicationID: d.ApplicationID, PublicKey: d.PublicKey, Mode: d.Mode,
		BaseURL: d.BaseURL, Guilds: d.Guilds, State: state, Logger: log}
}

// doctorDiscord prints the Discord checks; it returns the number of errors.
func doctorDiscord(ctx context.Context, cfg *config.Config, w io.Writer) int {
	fmt.Fprintln(w, "Discord")
	if !cfg.Discord.Enabled {
		fmt.Fprintln(w, "  · not enabled (discord.enabled): skipped")
		return 0
	}
	problems := 0
	for _, f := range discord.Doctor(ctx, discordConfig(cfg, nil, nil)) {
		mark := map[discord.Severity]string{discord.SeverityOK: "✓", discord.SeverityInfo: "·", discord.SeverityWarn: "!", discord.SeverityError: "✗"}[f.Severity]
		fmt.Fprintf(w, "  %s %-12s %s\n", mark, f.Check, f.Message)
		if f.Severity == discord.SeverityError {
			problems++
		}
	}
	return problems
}
