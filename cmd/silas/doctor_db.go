package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/keys"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/config"
)

// doctorDatabase checks the gateway's database role and the audit key:
// a role that can change audit_log (a superuser, its owner, or one holding
// UPDATE, DELETE or TRUNCATE on it) makes the chain's protection rest on
// the checkpoints alone. Findings are warnings; it returns the number of
// errors (the database cannot be reached).
func doctorDatabase(ctx context.Context, env *cliEnv, cfg *config.Config) int {
	out := func(mark, check, format string, a ...any) {
		fmt.Fprintf(env.stdout, "  %s %-12s %s\n", mark, check, fmt.Sprintf(format, a...))
	}
	fmt.Fprintln(env.stdout, "Database and audit")
	defer doctorAuditKey(cfg, out)
	if cfg.Database.URL == "" {
		if _, err := os.Stat(filepath.Join(cfg.DataDir, "pg", "pgdata", "PG_VERSION")); err != nil {
			out("·", "database", "no database.url and no local cluster under %s yet: skipped", filepath.Join(cfg.DataDir, "pg"))
			return 0
		}
	}
	log := slog.New(slog.DiscardHandler)
	db, err := openDatabase(ctx, cfg, log, false, store.Options{})
	if err != nil {
		out("✗", "database", "%v", err)
		return 1
	}
	defer db.Close(context.Background())
	r, err := db.store.AuditRole(ctx)
	if err != nil {
		out("✗", "database", "%v (has the schema been migrated? run `silas migrate`)", err)
		return 1
	}
	ok := true
	if r.Superuser {
		ok = false
		out("!", "database", "the gateway's role %s is a superuser: it can switch off the audit log's append-only trigger and rewrite it; give database.url a role without UPDATE, DELETE or TRUNCATE on audit_log (docs/operations.md)", r.User)
	}
	if r.OwnsAudit && !r.Superuser {
		ok = false
		out("!", "database", "the gateway's role %s owns audit_log (or is a member of its owner): it can drop the append-only trigger; let another role own the schema and run migrations (database.migrate_url, docs/operations.md)", r.User)
	}
	if len(r.CanModifyAudit) > 0 && !r.Superuser {
		ok = false
		out("!", "database", "the gateway's role %s can %s audit_log; revoke it (docs/operations.md)", r.User, strings.Join(r.CanModifyAudit, ", "))
	}
	if !r.TriggerEnabled {
		ok = false
		out("!", "database", "the append-only trigger on audit_log is missing or disabled: run `silas migrate`")
	}
	if ok {
		out("✓", "database", "the gateway's role %s can only read and append the audit log", r.User)
	}
	doctorRiver(ctx, db.store, out)
	return 0
}

func doctorAuditKey(cfg *config.Config, out func(mark, check, format string, a ...any)) {
	path := auditKeyPath(cfg)
	key, err := keys.Load(path)
	switch {
	case errors.Is(err, keys.ErrNoKey):
		out("·", "audit key", "%s does not exist yet: serve creates it at first start", path)
		return
	case err != nil:
		out("✗", "audit key", "%v", err)
		return
	}
	pubs, err := audit.LoadPublicKeys(auditPubPath(cfg))
	if errors.Is(err, fs.ErrNotExist) {
		out("!", "audit key", "%s is missing: serve writes it again at start; keep a copy offline for `silas audit verify --pubkey`", auditPubPath(cfg))
		return
	}
	if err != nil {
		out("✗", "audit key", "%v", err)
		return
	}
	id := audit.KeyID(key.Public().(ed25519.PublicKey))
	for _, p := range pubs {
		if audit.KeyID(p) == id {
			out("✓", "audit key", "%s (key id %s); public key in %s", path, id, auditPubPath(cfg))
			doctorLine(out, doctorAuditKeyReach(cfg))
			return
		}
	}
	out("!", "audit key", "%s (key id %s) is not among the public keys in %s: verify will reject new checkpoints", path, id, auditPubPath(cfg))
}
