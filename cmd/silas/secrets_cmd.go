package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"text/tabwriter"
	"time"

	"golang.org/x/crypto/acme/autocert"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/config"
	secretsweb "github.com/silas-gateway/silas/secrets-web"
)

// operatorActor is the audit actor of what an operator does from the
// command line (as `silas pair` records it).
const operatorActor core.IdentityID = "operator"

// cmdSecrets: `secrets list`, `secrets delete <name>`. Names and times
// only: no command here reads, opens or prints a value.
func cmdSecrets(ctx context.Context, env *cliEnv, args []string) error {
	sub, rest := subcommand(args)
	switch sub {
	case "list":
		fs := flags(env, "secrets list", "secrets list [--json]",
			"List the stored secrets: name, when it was created and last replaced, and when an approved\n"+
				"action last used it. Values are never shown (they are stored sealed; this command does not\n"+
				"open them).")
		asJSON := fs.Bool("json", false, "one JSON object per line")
		if err := parse(fs, rest); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			fs.Usage()
			return errUsage
		}
		return withStore(ctx, env, func(st *store.Store) error {
			list, err := st.ListSecrets(ctx)
			if err != nil {
				return err
			}
			if *asJSON {
				for _, s := range list {
					m := map[string]any{"name": s.Name, "created_at": s.CreatedAt.UTC().Format(time.RFC3339),
						"updated_at": s.UpdatedAt.UTC().Format(time.RFC3339), "last_used_at": nil}
					if !s.LastUsedAt.IsZero() {
						m["last_used_at"] = s.LastUsedAt.UTC().Format(time.RFC3339)
					}
					b, _ := json.Marshal(m)
					fmt.Fprintln(env.stdout, string(b))
				}
				return nil
			}
			if len(list) == 0 {
				fmt.Fprintln(env.stdout, "No secrets stored. `/secret <name>` in the chat asks for one through the secure form.")
				return nil
			}
			const layout = "2006-01-02 15:04:05"
			tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tCREATED\tUPDATED\tLAST USED")
			for _, s := range list {
				used := "never"
				if !s.LastUsedAt.IsZero() {
					used = s.LastUsedAt.Local().Format(layout)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.CreatedAt.Local().Format(layout), s.UpdatedAt.Local().Format(layout), used)
			}
			return tw.Flush()
		})
	case "delete":
		fs := flags(env, "secrets delete", "secrets delete <name>",
			"Delete a stored secret. The deletion is recorded in the audit log (secret.deleted, by name,\n"+
				"actor \"operator\"). Actions that declare the secret are refused until it is given again with\n"+
				"`/secret <name>`. A /secret link for that name that is still unused can store it again.")
		if err := parse(fs, rest); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			fs.Usage()
			return errUsage
		}
		name := fs.Arg(0)
		if err := secrets.ValidateName(name); err != nil {
			return err
		}
		return withStore(ctx, env, func(st *store.Store) error {
			ok, err := st.DeleteSecret(ctx, name, operatorActor, "")
			if err != nil {
				return err
			}
			if !ok {
				return &exitError{code: 1, msg: fmt.Sprintf("there is no secret named %s", name)}
			}
			fmt.Fprintf(env.stdout, "deleted secret %s\n", name)
			return nil
		})
	default:
		fs := flags(env, "secrets", "secrets list | secrets delete <name>",
			"list    stored secret names and times (never values)\n"+
				"delete  remove a stored secret (audited by name)\n\n"+
				"Secrets are given through the secure form: send `/secret <name>` in the chat.")
		if err := parse(fs, rest); err != nil {
			return err
		}
		fs.Usage()
		return errUsage
	}
}

// cmdSecretsWeb serves the secure form without the gateway.
func cmdSecretsWeb(ctx context.Context, env *cliEnv, args []string) error {
	fs := flags(env, "secrets-web", "secrets-web",
		"Serve only the secure HTTPS form for credentials (the secrets_web.* settings: listen, public_url,\n"+
			"tls), without the gateway, against the same database and the same secrets data key\n"+
			"(secrets.key, secrets.key_file or data_dir/keys/secrets.key). `silas serve` already serves the\n"+
			"form itself; use this to take values for /secret links while the gateway is stopped or from a\n"+
			"separate process. secrets_web.enabled is not consulted: running this command enables it.\n\n"+
			"Links are minted by the gateway from its own secrets_web.public_url: this process must be\n"+
			"reachable there, and must not share the gateway's listen address.\n\n"+
			"Without the gateway's engine, a stored value does NOT update the chat: no card update is\n"+
			"enqueued, so the /secret card keeps showing its link (a second use answers \"already used\")\n"+
			"instead of \"<name> stored ✓\". The value is stored and audited (secret.stored) all the same;\n"+
			"check with `silas secrets list`. The CSRF key is random per process: a form opened before a\n"+
			"restart must be reopened from its link.")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	cfg, err := loadConfig(env)
	if err != nil {
		return err
	}
	log := newLogger(cfg, env.stderr)
	slog.SetDefault(log)
	db, err := openDatabase(ctx, cfg, log, store.Options{MaxConns: 4})
	if err != nil {
		return err
	}
	defer db.Close(context.Background())
	if err := requireSchema(ctx, db.store); err != nil {
		return err
	}
	sealer, err := openSealer(cfg, log)
	if err != nil {
		return err
	}
	// *store.Store fulfils requests on its own: value, request status and
	// audit entry commit together, but no chat card update is enqueued
	// (that is core/secureinput's part of FulfillSecret).
	form, err := newSecretsWebForm(cfg, db.store, sealer, log)
	if err != nil {
		return err
	}
	listen := cfg.SecretsWeb.Listen
	if listen == "" {
		listen = secretsweb.DefaultListen
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("secrets_web.listen %s: %w", listen, err)
	}
	fmt.Fprintf(env.stdout, "Secure form for credentials: %s", cfg.SecretsWeb.PublicURL)
	if fp := form.Fingerprint(); fp != "" {
		fmt.Fprintf(env.stdout, " (self-signed certificate, SHA-256 fingerprint %s)", fp)
	}
	fmt.Fprintln(env.stdout)
	fmt.Fprintln(env.stdout, "Serving the form alone: stored values do not update chat cards. Ctrl-C stops.")
	err = form.Serve(ctx, ln)
	log.Info("stopped")
	return err
}

// newSecretsWebForm builds the secure form from the secrets_web settings
// for any request store: the engine (serve: the card update commits with
// the value) or *store.Store (secrets-web: no card update).
func newSecretsWebForm(cfg *config.Config, requests secretsweb.RequestStore, sealer *secrets.Sealer, log *slog.Logger) (*secretsweb.Server, error) {
	return newSecureForm(cfg, requests, sealer, log, nil, nil)
}

// newSecureForm is newSecretsWebForm with the passkey pages and the
// approval preview pages (serve's form; nil: none).
func newSecureForm(cfg *config.Config, requests secretsweb.RequestStore, sealer *secrets.Sealer, log *slog.Logger, passkeys secretsweb.Passkeys,
	previews secretsweb.PreviewSource) (*secretsweb.Server, error) {
	sw := cfg.SecretsWeb
	dir := sw.TLS.Dir
	if dir == "" {
		dir = filepath.Join(cfg.DataDir, "secrets-web")
	}
	deps := secretsweb.Deps{Requests: requests, Sealer: sealer, Logger: log, Passkeys: passkeys, Previews: previews}
	if sw.TLS.Mode == secretsweb.TLSACME {
		// Certificates for the public host, answered with TLS-ALPN-01 on
		// the form's own port (no port 80 needed); cached under dir.
		u, err := url.Parse(sw.PublicURL)
		if err != nil || u.Hostname() == "" {
			return nil, fmt.Errorf("secrets_web.public_url: %q has no host for ACME", sw.PublicURL)
		}
		deps.ACME = &autocert.Manager{Prompt: autocert.AcceptTOS, HostPolicy: autocert.HostWhitelist(u.Hostname()),
			Cache: autocert.DirCache(filepath.Join(dir, "acme")), Email: sw.TLS.ACMEEmail}
	}
	return secretsweb.New(secretsweb.Config{
		Listen: sw.Listen, PublicURL: sw.PublicURL, MaxValueBytes: sw.MaxValueBytes,
		Limits: httpLimits(cfg), AllowedHosts: cfg.HTTP.AllowedHosts,
		TLS: secretsweb.TLSConfig{Mode: sw.TLS.Mode, CertFile: sw.TLS.CertFile, KeyFile: sw.TLS.KeyFile, Dir: dir,
			SelfSignedListenAny: sw.TLS.SelfSignedListenAny},
	}, deps)
}
