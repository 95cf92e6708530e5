package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/stepup"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/config"
	"github.com/silas-gateway/silas/internal/doctor"
)

// newStepUp is the passkey step-up (core/stepup) from passkeys.* and
// secrets_web.*: nil when the secure form is off or its public_url is not
// a host browsers accept for passkeys (then irreversible actions are
// refused, as without step-up). An rp_id set explicitly must be valid.
func newStepUp(cfg *config.Config, st *store.Store, pub ed25519.PublicKey, log *slog.Logger) (*stepup.Service, error) {
	if !cfg.SecretsWeb.Enabled {
		return nil, nil
	}
	s, err := stepup.New(stepUpConfig(cfg, pub, log), st)
	if err != nil && cfg.Passkeys.RPID == "" {
		log.Info("passkey step-up unavailable: irreversible actions are refused", slog.String("reason", err.Error()))
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("passkeys.rp_id: %w", err)
	}
	return s, nil
}

func stepUpConfig(cfg *config.Config, pub ed25519.PublicKey, log *slog.Logger) stepup.Config {
	return stepup.Config{PublicURL: cfg.SecretsWeb.PublicURL, RPID: cfg.Passkeys.RPID, Key: pub,
		StepUpTTL: cfg.Passkeys.StepUpTTL.Duration, EnrollTTL: cfg.Passkeys.EnrollTTL.Duration, Logger: log}
}

func cmdPasskey(ctx context.Context, env *cliEnv, args []string) error {
	sub, rest := subcommand(args)
	switch sub {
	case "add":
		fs := flags(env, "passkey add", "passkey add [--owner IDENTITY] [--name NAME]",
			"Print a one-time link to the secure form that registers a passkey (WebAuthn, with user verification) for an owner identity. "+
				"Irreversible actions that identity approves then run only after it confirms them with a passkey. "+
				"The link works once and expires after passkeys.enroll_ttl; open it in the browser of the device that holds the passkey.")
		owner := fs.String("owner", "", "owner identity (channel:id, one of identities.owners); default: the only configured owner")
		name := fs.String("name", "passkey", "a name to tell this passkey apart (silas passkey list)")
		if err := parse(fs, rest); err != nil {
			return err
		}
		return withStepUp(ctx, env, func(cfg *config.Config, st *store.Store, s *stepup.Service) error {
			who, err := pickOwner(cfg, *owner)
			if err != nil {
				return err
			}
			link, exp, err := s.Enroll(ctx, who, *name)
			if err != nil {
				return err
			}
			fmt.Fprintf(env.stdout, "Open this link on the device with the passkey (works once, until %s):\n%s\n", exp.Local().Format("15:04:05"), link)
			return nil
		})
	case "list":
		fs := flags(env, "passkey list", "passkey list [--owner IDENTITY]", "List registered passkeys: owner, name, credential id prefix, sign count, registered and last used.")
		owner := fs.String("owner", "", "only this owner's")
		if err := parse(fs, rest); err != nil {
			return err
		}
		return withStore(ctx, env, func(st *store.Store) error {
			keys, err := st.Passkeys(ctx, core.IdentityID(*owner))
			if err != nil {
				return err
			}
			if len(keys) == 0 {
				fmt.Fprintln(env.stdout, "No passkeys registered. Register one with `silas passkey add`.")
				return nil
			}
			for _, k := range keys {
				last := "never used"
				if !k.LastUsedAt.IsZero() {
					last = "last used " + k.LastUsedAt.Local().Format("2006-01-02 15:04")
				}
				fmt.Fprintf(env.stdout, "%s  %-16s  %s  sign count %d  registered %s, %s\n", k.Owner, k.Name, credPrefix(k.CredentialID),
					k.SignCount, k.CreatedAt.Local().Format("2006-01-02 15:04"), last)
			}
			return nil
		})
	case "remove":
		fs := flags(env, "passkey remove", "passkey remove --owner IDENTITY NAME|CREDENTIAL-PREFIX",
			"Remove an owner's passkey by its name or the first 8+ characters of its credential id, audited as passkey.removed.")
		owner := fs.String("owner", "", "the passkey's owner identity (required)")
		if err := parse(fs, rest); err != nil {
			return err
		}
		if fs.NArg() != 1 || *owner == "" {
			fs.Usage()
			return errUsage
		}
		which := fs.Arg(0)
		return withStore(ctx, env, func(st *store.Store) error {
			var n int
			err := st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
				var entries []audit.Entry
				var err error
				n, entries, err = tx.RemovePasskeys(ctx, core.IdentityID(*owner), func(p store.Passkey) bool {
					id := stepup.CredentialText(p.CredentialID)
					return p.Name == which || (len(which) >= 8 && strings.HasPrefix(id, which))
				}, string(operatorActor))
				return entries, err
			})
			if err != nil {
				return err
			}
			if n == 0 {
				return &exitError{code: 1, msg: fmt.Sprintf("no passkey %q of %s", which, *owner)}
			}
			fmt.Fprintf(env.stdout, "Removed %d passkey(s) of %s.\n", n, *owner)
			return nil
		})
	default:
		fmt.Fprintln(env.stderr, "Usage: silas passkey add|list|remove (passkey step-up for irreversible actions, docs/passkeys.md)")
		return errUsage
	}
}

func credPrefix(id []byte) string {
	t := stepup.CredentialText(id)
	if len(t) > 12 {
		t = t[:12] + "…"
	}
	return t
}

// pickOwner is --owner, checked against identities.owners, or the only
// configured owner.
func pickOwner(cfg *config.Config, owner string) (core.IdentityID, error) {
	owners := cfg.Identities.Owners
	if owner == "" {
		if len(owners) != 1 {
			return "", fmt.Errorf("name the owner with --owner (identities.owners lists %d)", len(owners))
		}
		return core.IdentityID(owners[0]), nil
	}
	for _, o := range owners {
		if o == owner {
			return core.IdentityID(o), nil
		}
	}
	// A platform identity bound to the owner by pairing is an owner too;
	// the store knows those, the config does not.
	if !strings.Contains(owner, ":") {
		return "", fmt.Errorf("--owner %q is not an identity (channel:id)", owner)
	}
	return core.IdentityID(owner), nil
}

// withStepUp opens the store and builds the step-up from the config, or
// says why passkeys are unavailable.
func withStepUp(ctx context.Context, env *cliEnv, f func(*config.Config, *store.Store, *stepup.Service) error) error {
	cfg, err := loadConfig(env)
	if err != nil {
		return err
	}
	log := newLogger(cfg, env.stderr)
	return withStore(ctx, env, func(st *store.Store) error {
		if !cfg.SecretsWeb.Enabled {
			return errors.New("passkeys need the secure form: set secrets_web.enabled (docs/passkeys.md)")
		}
		// Enrollment checks no request signature: no key needed.
		s, err := stepup.New(stepUpConfig(cfg, nil, log), st)
		if err != nil {
			return err
		}
		return f(cfg, st, s)
	})
}

// doctorPasskeys reports, when a policy rule marks actions irreversible,
// whether the passkey step-up they need is available and which owners
// have no passkey (their irreversible approvals are refused until they
// register one). Nil when no rule is irreversible.
func doctorPasskeys(ctx context.Context, env *cliEnv, cfg *config.Config) []doctor.Finding {
	var rules []string
	for _, r := range cfg.Policy.Rules {
		if r.Risk == cards.RiskIrreversible {
			rules = append(rules, r.Name)
		}
	}
	if len(rules) == 0 {
		return nil
	}
	if !cfg.SecretsWeb.Enabled {
		return []doctor.Finding{{Severity: doctor.Warn, Check: "step-up", Message: fmt.Sprintf(
			"rules %s are irreversible, but the secure form is off (secrets_web.enabled): those actions are refused", strings.Join(rules, ", "))}}
	}
	if _, err := stepup.New(stepUpConfig(cfg, nil, slog.New(slog.DiscardHandler)), &store.Store{}); err != nil {
		return []doctor.Finding{{Severity: doctor.Warn, Check: "step-up", Message: fmt.Sprintf(
			"rules %s are irreversible, but passkeys cannot work here (%v): those actions are refused", strings.Join(rules, ", "), err)}}
	}
	if cfg.Database.URL == "" {
		if _, err := os.Stat(filepath.Join(cfg.DataDir, "pg")); err != nil {
			return doctor.Skipped("no database configured: passkeys not checked")
		}
	}
	var out []doctor.Finding
	err := withStore(ctx, env, func(st *store.Store) error {
		keys, err := st.Passkeys(ctx, "")
		if err != nil {
			return err
		}
		has := map[core.IdentityID]int{}
		for _, k := range keys {
			has[k.Owner]++
		}
		var without []string
		for _, o := range cfg.Identities.Owners {
			if has[core.IdentityID(o)] == 0 {
				without = append(without, o)
			}
		}
		if len(without) > 0 {
			out = append(out, doctor.Finding{Severity: doctor.Warn, Check: "passkeys", Message: fmt.Sprintf(
				"rules %s are irreversible and these owners have no passkey, so they cannot approve them: %s (silas passkey add --owner …)",
				strings.Join(rules, ", "), strings.Join(without, ", "))})
			return nil
		}
		out = append(out, doctor.Finding{Severity: doctor.OK, Check: "passkeys", Message: fmt.Sprintf("%d passkey(s); every configured owner has one", len(keys))})
		return nil
	})
	if err != nil {
		return []doctor.Finding{{Severity: doctor.Error, Check: "passkeys", Message: err.Error()}}
	}
	return out
}
