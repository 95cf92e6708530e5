package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/consent"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/config"
)

// consentLimits is consents.* as the gateway takes it: a zero TTL when
// standing approvals are off.
func consentLimits(cfg *config.Config) consent.Limits {
	if !cfg.Consents.Enabled {
		return consent.Limits{}
	}
	return consent.Limits{TTL: cfg.Consents.DefaultTTL.Duration, MaxTTL: cfg.Consents.MaxTTL.Duration, MaxUses: cfg.Consents.MaxUses}
}

func cmdConsents(ctx context.Context, env *cliEnv, args []string) error {
	sub, rest := subcommand(args)
	switch sub {
	case "list":
		fs := flags(env, "consents list", "consents list", "List active standing approvals (not revoked, not expired) in every conversation.")
		if err := parse(fs, rest); err != nil {
			return err
		}
		return withStore(ctx, env, func(st *store.Store) error {
			list, err := st.ActiveConsents(ctx, "", time.Now())
			if err != nil {
				return err
			}
			if len(list) == 0 {
				fmt.Fprintln(env.stdout, "No active standing approvals.")
				return nil
			}
			for _, c := range list {
				what := (core.Action{Argv: c.Argv}).CommandLine()
				if c.Prefix {
					what += " …"
				}
				fmt.Fprintf(env.stdout, "%s  %s  %s  up to %s, lanes %s, %d/%d uses, %d/%d units, by %s, expires %s\n",
					c.ID, c.Conversation, what, c.MaxRisk, strings.Join(c.Lanes, ","), c.Uses, c.MaxUses, c.Units, c.CostCap, c.CreatedBy,
					c.ExpiresAt.Local().Format("2006-01-02 15:04:05"))
			}
			return nil
		})
	case "revoke":
		fs := flags(env, "consents revoke", "consents revoke ID", "Revoke a standing approval (its id, or its first 8+ characters), audited as consent.revoked; the next run of its command asks with a card again.")
		if err := parse(fs, rest); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			fs.Usage()
			return errUsage
		}
		return withStore(ctx, env, func(st *store.Store) error {
			full, ok, err := st.RevokeConsent(ctx, fs.Arg(0), operatorActor)
			if err != nil {
				return err
			}
			if !ok {
				return &exitError{code: 1, msg: fmt.Sprintf("no active standing approval %s", fs.Arg(0))}
			}
			fmt.Fprintf(env.stdout, "Revoked %s.\n", full)
			return nil
		})
	default:
		fs := flags(env, "consents", "consents list | consents revoke ID",
			"list         active standing approvals (\"Allow this for 1 h\" on a card), every conversation\n"+
				"revoke ID    revoke one (audited); its command asks with a card again\n\nSee docs/approvals.md.")
		if err := parse(fs, rest); err != nil {
			return err
		}
		fs.Usage()
		return errUsage
	}
}
