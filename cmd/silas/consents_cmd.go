package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/consent"
	"github.com/silas-gateway/silas/core/keys"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/config"
)

// consentLimits is consents.* as the gateway takes it: a zero TTL when
// standing approvals are off.
func consentLimits(cfg *config.Config) consent.Limits {
	if !cfg.Consents.Enabled {
		return consent.Limits{}
	}
	return consent.Limits{TTL: cfg.Consents.DefaultTTL.Duration, MaxTTL: cfg.Consents.MaxTTL.Duration, MaxUses: cfg.Consents.MaxUses,
		CostCap: cfg.Consents.Cap(), TokensPerUnit: cfg.Consents.TokensPerUnit}
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
				if c.Scope == consent.ScopeRun {
					what = fmt.Sprintf("run %s (%s v%s) steps %s: %s", c.Run, c.Flow, c.FlowVersion, strings.Join(c.Nodes, ","), strings.Join(c.Programs, ","))
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
	case "allow-run":
		return cmdAllowRun(ctx, env, rest)
	default:
		fs := flags(env, "consents", "consents list | consents revoke ID | consents allow-run RUN …",
			"list         active standing approvals (\"Allow this for 1 h\" on a card), every conversation\n"+
				"revoke ID    revoke one (audited); its command asks with a card again\n"+
				"allow-run    the owner's consent for one flow run's listed steps (flows.run_writes and\n"+
				"             flows.automatable_execution on)\n\nSee docs/approvals.md.")
		if err := parse(fs, rest); err != nil {
			return err
		}
		fs.Usage()
		return errUsage
	}
}

// cmdAllowRun mints, as the owner, a run consent (docs/approvals.md,
// "Flow consents"): the listed nodes of one run may run the listed
// programs without a card, within the uses, cost cap, lanes, risk and
// time given. Signed with the gateway key, audited as consent.minted.
func cmdAllowRun(ctx context.Context, env *cliEnv, args []string) error {
	fs := flags(env, "consents allow-run", "consents allow-run [flags] RUN",
		"Let the listed steps of flow run RUN run their programs without a card, each still with its own single-use token (flows.run_writes and flows.automatable_execution must be on).")
	nodes := fs.String("nodes", "", "comma-separated node ids the consent covers (required)")
	programs := fs.String("programs", "", "comma-separated exact programs (argv[0]) the nodes may run (required; never a shell, interpreter or wrapper)")
	uses := fs.Int("uses", 20, "number of steps it covers")
	costCap := fs.Int("cost-cap", 0, "cost cap in units (default: one per use)")
	ttl := fs.Duration("ttl", time.Hour, "how long it lasts (24h at most)")
	risk := fs.String("max-risk", "medium", "highest risk covered: low or medium")
	lanes := fs.String("lanes", consent.LaneOffline, "comma-separated lanes: offline, network, model:NAME")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 || *nodes == "" || *programs == "" {
		fs.Usage()
		return errUsage
	}
	cfg, err := loadConfig(env)
	if err != nil {
		return err
	}
	if !cfg.Flows.RunWrites || !cfg.Flows.AutomatableExecution {
		return &exitError{code: 1, msg: "run consents are off: set flows.run_writes and flows.automatable_execution to true"}
	}
	key, err := keys.Load(keyPath(cfg))
	if err != nil {
		return fmt.Errorf("the gateway key (run `silas serve` once): %w", err)
	}
	if *costCap == 0 {
		*costCap = *uses * consent.UnitsPerAction
	}
	return withStore(ctx, env, func(st *store.Store) error {
		run, err := st.GetFlowRun(ctx, fs.Arg(0))
		if err != nil {
			return &exitError{code: 1, msg: fmt.Sprintf("no flow run %s: %v", fs.Arg(0), err)}
		}
		g := consent.RunGrant{Run: run.ID, Flow: run.Flow, FlowVersion: run.Version, Nodes: strings.Split(*nodes, ","), Tool: "shell",
			Programs: strings.Split(*programs, ","), MaxRisk: cards.Risk(*risk), Lanes: strings.Split(*lanes, ","), MaxUses: *uses,
			CostCap: *costCap, TTL: *ttl}
		c, err := consent.ForRun(core.NewID(), g, string(run.Conversation), string(operatorActor), time.Now(),
			consent.Limits{TTL: time.Hour, MaxTTL: 24 * time.Hour})
		if err != nil {
			return &exitError{code: 1, msg: err.Error()}
		}
		if err := consent.Sign(key, &c); err != nil {
			return err
		}
		err = st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			return []audit.Entry{{Kind: audit.KindConsentMinted, Actor: string(operatorActor), Conversation: string(run.Conversation),
				Data: map[string]any{"consent": c.ID, "scope": string(c.Scope), "run": c.Run, "flow": c.Flow, "flow_version": c.FlowVersion,
					"nodes": c.Nodes, "programs": c.Programs, "max_risk": string(c.MaxRisk), "lanes": c.Lanes, "max_uses": c.MaxUses,
					"cost_cap": c.CostCap, "expires_at": c.ExpiresAt.Format(time.RFC3339)}}}, tx.InsertConsent(ctx, c)
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(env.stdout, "Consent %s: run %s of %s v%s, steps %s may run %s without a card, up to %s risk, %d uses, %d units, until %s.\n",
			c.ID, c.Run, c.Flow, c.FlowVersion, strings.Join(c.Nodes, ","), strings.Join(c.Programs, ","), c.MaxRisk, c.MaxUses, c.CostCap,
			c.ExpiresAt.Local().Format("2006-01-02 15:04:05"))
		return nil
	})
}
