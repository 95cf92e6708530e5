package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/config"
	"github.com/silas-gateway/silas/internal/pgcluster"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *cliEnv, args []string) error
}

var commands = []command{
	{"serve", "run the gateway (web chat, turn pipeline, outbox)", cmdServe},
	{"migrate", "apply database migrations", cmdMigrate},
	{"keys", "manage the gateway signing key (keys init) and the keys the database recorded (keys forget)", cmdKeys},
	{"pair", "print a one-time code that binds a platform identity to the owner", cmdPair},
	{"audit", "check or show the audit log (audit verify, audit tail)", cmdAudit},
	{"secrets", "list or delete stored secrets by name, never values (secrets list, secrets delete)", cmdSecrets},
	{"secrets-web", "serve only the secure HTTPS form for credentials (without the gateway)", cmdSecretsWeb},
	{"webchat", "end every web chat session (webchat revoke)", cmdWebchat},
	{"consents", "list or revoke standing approvals (consents list, consents revoke ID)", cmdConsents},
	{"passkey", "register, list or remove owners' passkeys for the step-up of irreversible actions (passkey add|list|remove)", cmdPasskey},
	{"mcp", "Silas as an MCP server for other agents: bearer tokens (mcp token add|list|revoke), the stdio bridge (mcp serve)", cmdMCP},
	{"whatsapp", "link Silas as a WhatsApp device, show or remove the link (whatsapp link|status|unlink)", cmdWhatsApp},
	{"flow", "check and draw runbooks (flow validate FILE…, flow list, flow show NAME)", cmdFlow},
	{"doctor", "check the database role, the audit key, the sandbox's isolation, quarantined events and platform settings (Telegram token and webhook, Slack tokens and scopes) and report problems in plain words", cmdDoctor},
	{"config", "print the example configuration (config example) or check one (config check)", cmdConfig},
	{"version", "print the version", cmdVersion},
}

type cliEnv struct {
	stdout, stderr io.Writer
	configPath     string
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "Silas — a gateway where every action passes approval, a sandbox, verification and an audit chain.\n\n")
	fmt.Fprintf(w, "Usage: silas <command> [--config FILE] [flags]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun `silas <command> --help` for a command's flags. The config file defaults to $SILAS_CONFIG;\nwithout one, built-in defaults apply (see `silas config example`).\n")
}

// errUsage makes run print usage and exit 2.
var errUsage = errors.New("usage")

// exitError carries a specific exit code (for example audit verify's 1).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	env := &cliEnv{stdout: stdout, stderr: stderr, configPath: os.Getenv("SILAS_CONFIG")}
	fs := flag.NewFlagSet("silas", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&env.configPath, "config", env.configPath, "configuration file (YAML)")
	fs.Usage = func() { usage(stderr) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	rest := fs.Args()
	if len(rest) == 0 {
		usage(stderr)
		return 2
	}
	for _, c := range commands {
		if c.name != rest[0] {
			continue
		}
		err := c.run(ctx, env, rest[1:])
		var ee *exitError
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			return 2
		case errors.As(err, &ee):
			fmt.Fprintln(stderr, ee.msg)
			return ee.code
		default:
			fmt.Fprintf(stderr, "silas %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "silas: unknown command %q\n\n", rest[0])
	usage(stderr)
	return 2
}

// flags builds a FlagSet whose --help prints a description first. Every
// subcommand accepts --config too, because people type it after the
// command (`silas serve --config FILE`); it overrides the one given before.
func flags(env *cliEnv, name, synopsis, desc string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	fs.StringVar(&env.configPath, "config", env.configPath, "configuration file (YAML); default $SILAS_CONFIG")
	fs.Usage = func() {
		fmt.Fprintf(env.stderr, "Usage: silas %s\n\n%s\n\nFlags:\n", synopsis, desc)
		fs.PrintDefaults()
	}
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	return nil
}

func loadConfig(env *cliEnv) (*config.Config, error) {
	return config.Load(env.configPath, os.Environ())
}

func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// database is an open store plus how to release it.
type database struct {
	store   *store.Store
	cluster *pgcluster.Cluster
	owned   bool // this process started the cluster and stops it
	// dsn is the runtime (app) role's; migrateDSN the schema owner's, the
	// same when one role does both (database.migrate_url unset).
	dsn, migrateDSN string
}

// migrate applies pending migrations as the owner role and, when the
// runtime role is another one, grants it what it needs and no more
// (store.GrantApp: no UPDATE, DELETE or TRUNCATE on the audit tables).
func (d *database) migrate(ctx context.Context, log *slog.Logger) (int, error) {
	if d.migrateDSN == d.dsn {
		return d.store.Migrate(ctx)
	}
	owner, err := store.Open(ctx, d.migrateDSN, store.Options{Logger: log, MaxConns: 2})
	if err != nil {
		return 0, fmt.Errorf("database.migrate_url: %w", err)
	}
	defer owner.Close()
	n, err := owner.Migrate(ctx)
	if err != nil {
		return n, err
	}
	ownerRole, err := owner.CurrentUser(ctx)
	if err != nil {
		return n, err
	}
	appRole, err := d.store.CurrentUser(ctx)
	if err != nil {
		return n, err
	}
	if appRole != ownerRole {
		if err := owner.GrantApp(ctx, appRole); err != nil {
			return n, err
		}
	}
	return n, nil
}

func (d *database) Close(ctx context.Context) {
	d.store.Close()
	if d.cluster != nil && d.owned {
		if err := d.cluster.Stop(ctx); err != nil {
			slog.Error("stopping the local PostgreSQL failed", slog.Any("err", err))
		}
	}
}

// openDatabase uses database.url, or else starts (or reuses) the local
// throwaway cluster under data_dir/pg. Close stops a cluster this process
// started: a command that starts the cluster for itself leaves none
// running behind it (issue 22); one found running (serve's) is left
// alone.
func openDatabase(ctx context.Context, cfg *config.Config, log *slog.Logger, opt store.Options) (*database, error) {
	d := &database{}
	dsn := cfg.Database.URL
	if dsn == "" {
		dir, err := filepath.Abs(filepath.Join(cfg.DataDir, "pg"))
		if err != nil {
			return nil, err
		}
		if err := prepareDataDir(cfg.DataDir); err != nil {
			return nil, err
		}
		log.Info("no database.url / DATABASE_URL set: using a local PostgreSQL cluster", slog.String("dir", dir))
		c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("start local PostgreSQL (set DATABASE_URL to use your own server): %w", err)
		}
		d.cluster, d.owned = c, !c.Reused
		dsn = c.AppDSN()
		d.migrateDSN = c.OwnerDSN()
	} else if cfg.Database.MigrateURL != "" {
		d.migrateDSN = cfg.Database.MigrateURL
	}
	d.dsn = dsn
	if d.migrateDSN == "" {
		d.migrateDSN = dsn
	}
	opt.Logger = log
	if opt.EntryKeyFile == "" {
		// Every process that appends MACs its entries (made at the first
		// append; a read-only command never makes it).
		opt.EntryKeyFile = auditEntryKeyPath(cfg)
	}
	st, err := store.Open(ctx, dsn, opt)
	if err != nil {
		if d.cluster != nil && d.owned {
			_ = d.cluster.Stop(context.Background())
		}
		return nil, err
	}
	d.store = st
	return d, nil
}

// prepareDataDir creates data_dir (0700). As root, the local cluster runs
// as the postgres user, which must traverse data_dir to reach data_dir/pg:
// add search permission only (0711), so others still cannot list it; the
// key directory inside stays 0700.
func prepareDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create data_dir %s: %w", dir, err)
	}
	if os.Geteuid() != 0 {
		return nil
	}
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if st.Mode().Perm()&0o001 == 0 {
		if err := os.Chmod(dir, st.Mode().Perm()|0o011); err != nil {
			return fmt.Errorf("make data_dir %s traversable for the postgres user: %w", dir, err)
		}
	}
	return nil
}

func keyPath(cfg *config.Config) string { return filepath.Join(cfg.DataDir, "keys", "gateway.key") }

func cmdVersion(_ context.Context, env *cliEnv, args []string) error {
	fs := flags(env, "version", "version", "Print the version of this binary.")
	if err := parse(fs, args); err != nil {
		return err
	}
	goVer := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVer = bi.GoVersion
	}
	fmt.Fprintf(env.stdout, "silas %s (%s)\n", version, goVer)
	return nil
}

func subcommand(args []string) (string, []string) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return "", args
	}
	return args[0], args[1:]
}
