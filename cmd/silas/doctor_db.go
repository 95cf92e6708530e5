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
	"github.com/silas-gateway/silas/internal/doctor"
)

// doctorDatabase checks the gateway's database role and the audit key:
// a role that can change audit_log (a superuser, its owner, or one holding
// UPDATE, DELETE or TRUNCATE on it) makes the chain's protection rest on
// the checkpoints alone. Those findings are warnings; a database that
// cannot be reached, or an audit key that cannot be read, is an error.
func doctorDatabase(ctx context.Context, cfg *config.Config) []doctor.Finding {
	out := append(doctorRole(ctx, cfg), doctorAuditKey(cfg))
	if out[len(out)-1].Severity == doctor.OK {
		// A key serve uses: who else can read it.
		out = append(out, doctorAuditKeyReach(cfg))
	}
	return out
}

// doctorRole is the database half of doctorDatabase: the role, the
// append-only trigger and the background jobs' state.
func doctorRole(ctx context.Context, cfg *config.Config) []doctor.Finding {
	var out doctor.List
	if cfg.Database.URL == "" {
		if _, err := os.Stat(filepath.Join(cfg.DataDir, "pg", "pgdata", "PG_VERSION")); err != nil {
			out.Add(doctor.Info, "database", "no database.url and no local cluster under %s yet: skipped", filepath.Join(cfg.DataDir, "pg"))
			return out
		}
	}
	log := slog.New(slog.DiscardHandler)
	db, err := openDatabase(ctx, cfg, log, store.Options{})
	if err != nil {
		out.Add(doctor.Error, "database", "%v", err)
		return out
	}
	defer db.Close(context.Background())
	r, err := db.store.AuditRole(ctx)
	if err != nil {
		out.Add(doctor.Error, "database", "%v (has the schema been migrated? run `silas migrate`)", err)
		return out
	}
	ok := true
	warn := func(format string, a ...any) {
		ok = false
		out.Add(doctor.Warn, "database", format, a...)
	}
	if r.Superuser {
		warn("the gateway's role %s is a superuser: it can switch off the audit log's append-only trigger and rewrite it; give database.url a role without UPDATE, DELETE or TRUNCATE on audit_log (docs/operations.md)", r.User)
	}
	if r.OwnsAudit && !r.Superuser {
		warn("the gateway's role %s owns audit_log (or is a member of its owner): it can drop the append-only trigger; let another role own the schema and run migrations (database.migrate_url, docs/operations.md)", r.User)
	}
	if len(r.CanModifyAudit) > 0 && !r.Superuser {
		warn("the gateway's role %s can %s audit_log; revoke it (docs/operations.md)", r.User, strings.Join(r.CanModifyAudit, ", "))
	}
	if !r.TriggerEnabled {
		warn("the append-only trigger on audit_log is missing or disabled: run `silas migrate`")
	}
	if ok {
		out.Add(doctor.OK, "database", "the gateway's role %s can only read and append the audit log", r.User)
	}
	out = append(out, doctorRiver(ctx, db.store)...)
	return append(out, doctorLeaseStore(ctx, db.store)...)
}

// doctorAuditKey checks that the audit key can be read and that verify
// trusts it (its public key is in the public key file).
func doctorAuditKey(cfg *config.Config) doctor.Finding {
	f := func(s doctor.Severity, format string, a ...any) doctor.Finding {
		return doctor.Finding{Severity: s, Check: "audit key", Message: fmt.Sprintf(format, a...)}
	}
	path := auditKeyPath(cfg)
	key, err := keys.Load(path)
	switch {
	case errors.Is(err, keys.ErrNoKey):
		return f(doctor.Info, "%s does not exist yet: serve creates it at first start", path)
	case err != nil:
		return f(doctor.Error, "%v", err)
	}
	pubs, err := audit.LoadPublicKeys(auditPubPath(cfg))
	if errors.Is(err, fs.ErrNotExist) {
		return f(doctor.Warn, "%s is missing: serve writes it again at start; keep a copy offline for `silas audit verify --pubkey`", auditPubPath(cfg))
	}
	if err != nil {
		return f(doctor.Error, "%v", err)
	}
	id := audit.KeyID(key.Public().(ed25519.PublicKey))
	for _, p := range pubs {
		if audit.KeyID(p) == id {
			return f(doctor.OK, "%s (key id %s); public key in %s", path, id, auditPubPath(cfg))
		}
	}
	return f(doctor.Warn, "%s (key id %s) is not among the public keys in %s: verify will reject new checkpoints", path, id, auditPubPath(cfg))
}
