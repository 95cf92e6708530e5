package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/silas-gateway/silas/configs"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/keys"
	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/trust"
	"github.com/silas-gateway/silas/internal/config"
)

func cmdMigrate(ctx context.Context, env *cliEnv, args []string) error {
	fs := flags(env, "migrate", "migrate", "Apply pending database migrations (serve does this at start unless database.auto_migrate is false),\n"+
		"as database.migrate_url's role (default: database.url's), then grant database.url's role what the gateway\n"+
		"needs: no UPDATE, DELETE or TRUNCATE on the audit log (docs/operations.md).")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(env)
	if err != nil {
		return err
	}
	log := newLogger(cfg, env.stderr)
	db, err := openDatabase(ctx, cfg, log, store.Options{})
	if err != nil {
		return err
	}
	defer db.Close(context.Background())
	n, err := db.migrate(ctx, log)
	if err != nil {
		return err
	}
	cur, _, _ := db.store.SchemaStatus(ctx)
	fmt.Fprintf(env.stdout, "applied %d migration(s); schema version %d\n", n, cur)
	return nil
}

func cmdKeys(ctx context.Context, env *cliEnv, args []string) error {
	sub, rest := subcommand(args)
	if sub == "forget" {
		return cmdKeysForget(ctx, env, rest)
	}
	if sub != "init" {
		fs := flags(env, "keys", "keys init|forget", "keys init    create the gateway's Ed25519 signing key (data_dir/keys/gateway.key, mode 0600).\n"+
			"keys forget  forget the fingerprint of a key the database recorded (after replacing it on every instance).\n\n"+
			"serve creates the key on first start too. It refuses to overwrite an existing key: a new key\ninvalidates every approval token and identity binding the old one signed.")
		if err := parse(fs, rest); err != nil {
			return err
		}
		fs.Usage()
		return errUsage
	}
	fs := flags(env, "keys init", "keys init", "Create the gateway's Ed25519 signing key. The key itself is never printed; its public fingerprint is.")
	if err := parse(fs, rest); err != nil {
		return err
	}
	cfg, err := loadConfig(env)
	if err != nil {
		return err
	}
	priv, err := keys.Create(keyPath(cfg))
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "created %s (public key fingerprint %s)\n", keyPath(cfg), fingerprint(priv))
	return nil
}

func fingerprint(priv ed25519.PrivateKey) string {
	h := sha256.Sum256(priv.Public().(ed25519.PublicKey))
	return "sha256:" + hex.EncodeToString(h[:8])
}

// pairAlphabet avoids look-alike characters (0/O, 1/I/L).
const pairAlphabet = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"

func newPairingCode() string {
	b := make([]byte, 10)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	var sb strings.Builder
	for i, c := range b {
		if i == 5 {
			sb.WriteByte('-')
		}
		sb.WriteByte(pairAlphabet[int(c)%len(pairAlphabet)])
	}
	return sb.String()
}

func cmdPair(ctx context.Context, env *cliEnv, args []string) error {
	fs := flags(env, "pair", "pair [platform] [--role owner|auth] [--ttl 10m]",
		"Print a one-time pairing code. Sending `/pair <code>` to Silas from a platform identity (for example\nyour Telegram account) binds that identity to the role with a record signed by the gateway key.\nGive a platform (telegram, slack, discord, whatsapp, webchat) to accept the code only from it.")
	role := fs.String("role", "owner", "trust the paired identity gets: owner or auth")
	ttl := fs.Duration("ttl", 10*time.Minute, "how long the code is valid")
	platform, rest := subcommand(args)
	if err := parse(fs, rest); err != nil {
		return err
	}
	if platform == "" && fs.NArg() > 0 {
		platform = fs.Arg(0)
	}
	if *role != "owner" && *role != "auth" {
		return fmt.Errorf("--role must be owner or auth, not %q", *role)
	}
	if *ttl < time.Minute || *ttl > 24*time.Hour {
		return fmt.Errorf("--ttl must be between 1m and 24h")
	}
	cfg, err := loadConfig(env)
	if err != nil {
		return err
	}
	log := newLogger(cfg, env.stderr)
	db, err := openDatabase(ctx, cfg, log, store.Options{})
	if err != nil {
		return err
	}
	defer db.Close(context.Background())
	if err := requireSchema(ctx, db.store); err != nil {
		return err
	}
	code := newPairingCode()
	expires := time.Now().Add(*ttl)
	err = db.store.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		tx.QueuePairingCode(trust.HashPairingCode(code), *role, platform, expires)
		return []audit.Entry{{Kind: audit.KindPairingCodeCreated, Actor: "operator", Data: map[string]any{"role": *role, "platform": platform, "expires_at": expires.UTC().Format(time.RFC3339)}}}, nil
	})
	if err != nil {
		return err
	}
	where := "any platform"
	if platform != "" {
		where = platform
	}
	fmt.Fprintf(env.stdout, "Pairing code: %s\nSend `/pair %s` to Silas from %s within %s to get %s trust. It works once.\n", code, code, where, *ttl, *role)
	return nil
}

func requireSchema(ctx context.Context, st *store.Store) error {
	cur, latest, err := st.SchemaStatus(ctx)
	if err != nil {
		return err
	}
	if cur < latest {
		return fmt.Errorf("database schema is at version %d, this binary needs %d: run `silas migrate`", cur, latest)
	}
	return nil
}

func withStore(ctx context.Context, env *cliEnv, f func(*store.Store) error) error {
	cfg, err := loadConfig(env)
	if err != nil {
		return err
	}
	log := newLogger(cfg, env.stderr)
	db, err := openDatabase(ctx, cfg, log, store.Options{})
	if err != nil {
		return err
	}
	defer db.Close(context.Background())
	if err := requireSchema(ctx, db.store); err != nil {
		return err
	}
	return f(db.store)
}

// checkServeSecrets reads the values serve reads at start outside the
// adapters (llm.api_key and llm.base_url through the very constructors serve
// calls, secrets.key), so that a `file:` pointing nowhere fails `config
// check` as it fails serve. It creates nothing: a missing secrets.key_file
// is one serve would create.
func checkServeSecrets(cfg *config.Config) error {
	quiet := slog.New(slog.DiscardHandler)
	if _, err := newAgent(cfg, quiet); err != nil {
		return err
	}
	if _, err := newTasks(cfg, quiet, nil); err != nil {
		return err
	}
	if cfg.Secrets.Key != "" {
		if _, err := secrets.ParseKeyValue(cfg.Secrets.Key); err != nil {
			return fmt.Errorf("config: secrets.key: %w", err)
		}
	}
	return nil
}

func cmdConfig(_ context.Context, env *cliEnv, args []string) error {
	sub, rest := subcommand(args)
	switch sub {
	case "example":
		fs := flags(env, "config example", "config example", "Print the example configuration; it documents every key and its default.")
		if err := parse(fs, rest); err != nil {
			return err
		}
		fmt.Fprint(env.stdout, configs.Example)
		return nil
	case "check":
		fs := flags(env, "config check", "config check", "Load the configuration (file from --config or $SILAS_CONFIG, plus SILAS_* variables), run each\n"+
			"enabled adapter's own validation (the same serve runs at start) and report the first problem.")
		if err := parse(fs, rest); err != nil {
			return err
		}
		cfg, err := config.Load(env.configPath, envList())
		if err != nil {
			return err
		}
		if err := checkAdapters(cfg); err != nil {
			return err
		}
		if err := checkServeSecrets(cfg); err != nil {
			return err
		}
		fmt.Fprintln(env.stdout, "configuration is valid")
		return nil
	default:
		fs := flags(env, "config", "config example | config check", "example  print the documented example configuration\ncheck    validate the configuration")
		if err := parse(fs, rest); err != nil {
			return err
		}
		fs.Usage()
		return errUsage
	}
}
