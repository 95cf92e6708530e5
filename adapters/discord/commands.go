package discord

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core/commands/catalog"
)

// Application commands are registered globally — the only way they work in
// DMs — with one bulk overwrite, and only when what Discord has differs
// from Commands(), so a restart writes nothing.

func boolPtr(b bool) *bool { return &b }

// Commands are the slash commands Silas registers: the menu of the one
// command catalog (core/commands/catalog), so Discord offers what every
// other channel does. Each maps onto the engine's text command of the same
// name, options appended in order.
func Commands() []*discordgo.ApplicationCommand {
	var out []*discordgo.ApplicationCommand
	for _, c := range catalog.Menu() {
		// DMPermission, not Contexts: Contexts also needs the app's install
		// contexts set up, and the commands were always registered this way
		// (the bulk overwrite compares this field: no re-registration).
		//lint:ignore SA1019 see above
		cmd := &discordgo.ApplicationCommand{Name: c.Name, Description: c.Description, DMPermission: boolPtr(true)}
		for _, a := range c.Args {
			typ := discordgo.ApplicationCommandOptionString
			if a.Integer {
				typ = discordgo.ApplicationCommandOptionInteger
			}
			cmd.Options = append(cmd.Options, &discordgo.ApplicationCommandOption{Type: typ, Name: a.Name, Description: a.Description, Required: a.Required})
		}
		out = append(out, cmd)
	}
	return out
}

// commandsEqual compares what Discord reports with what Silas wants, on
// the fields Silas sets.
func commandsEqual(have, want []*discordgo.ApplicationCommand) bool {
	if len(have) != len(want) {
		return false
	}
	key := func(c *discordgo.ApplicationCommand) string {
		s := c.Name + "\x00" + c.Description
		for _, o := range c.Options {
			s += "\x00" + o.Name + "\x01" + o.Description + "\x01" + o.Type.String()
			if o.Required {
				s += "\x01r"
			}
		}
		return s
	}
	var h, w []string
	for _, c := range have {
		if c == nil {
			return false
		}
		h = append(h, key(c))
	}
	for _, c := range want {
		w = append(w, key(c))
	}
	slices.Sort(h)
	slices.Sort(w)
	return slices.Equal(h, w)
}

// registerCommands makes Discord's global commands match Commands(),
// retrying with backoff until it succeeds or ctx ends.
func (a *Adapter) registerCommands(ctx context.Context) {
	b := kit.Backoff{Min: 2 * time.Second, Max: 5 * time.Minute}
	for {
		changed, err := a.syncCommands(ctx)
		if err == nil {
			if changed {
				a.log.Info("discord: application commands registered")
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		a.log.Warn("discord: could not register the application commands; retrying", slog.Any("err", err))
		d := b.Next()
		if ra, ok := kit.RetryAfterOf(err); ok && ra > d {
			d = ra
		}
		if kit.SleepCtx(ctx, d) != nil {
			return
		}
	}
}

func (a *Adapter) syncCommands(ctx context.Context) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, a.cfg.HTTPTimeout)
	defer cancel()
	have, err := a.rest.ApplicationCommands(a.cfg.ApplicationID, "", discordgo.WithContext(cctx))
	if err != nil {
		return false, mapError("list application commands", err)
	}
	want := Commands()
	if commandsEqual(have, want) {
		return false, nil
	}
	if _, err := a.rest.ApplicationCommandBulkOverwrite(a.cfg.ApplicationID, "", want, discordgo.WithContext(cctx)); err != nil {
		return false, mapError("register application commands", err)
	}
	return true, nil
}
