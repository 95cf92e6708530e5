package main

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/config"
)

// clusterKey is one key every instance on a database must share.
type clusterKey struct {
	name, what, where, fingerprint string
	// replaces are fingerprints of keys this one legitimately replaced
	// (the audit key's earlier public keys, kept in audit.pub by a
	// rotation): a record of one of them is updated, not refused.
	replaces []string
}

// clusterKeys are this instance's keys with their fingerprints (public-key
// hashes for the signing keys; domain-separated hashes for the symmetric
// ones, which reveal nothing of them), and the audit entry key's apart
// (nil when there is none). The keys are loaded by then: serve created any
// that were missing.
func clusterKeys(ctx context.Context, cfg *config.Config, st *store.Store, signing ed25519.PrivateKey, log *slog.Logger) ([]clusterKey, *clusterKey, error) {
	sk, err := secretsKey(cfg, log)
	if err != nil {
		return nil, nil, err
	}
	secretsWhere := secretsKeyPath(cfg)
	if cfg.Secrets.Key != "" {
		secretsWhere = "the value of secrets.key"
	}
	ak, _, err := audit.LoadOrCreateKey(auditKeyPath(cfg), auditPubPath(cfg))
	if err != nil {
		return nil, nil, err
	}
	trusted, err := audit.LoadPublicKeys(auditPubPath(cfg))
	if err != nil {
		return nil, nil, err
	}
	var earlier []string
	for _, p := range trusted {
		earlier = append(earlier, audit.KeyID(p))
	}
	keys := []clusterKey{
		{name: "signing", what: "gateway signing key", where: keyPath(cfg), fingerprint: fingerprint(signing)},
		{name: "secrets", what: "secrets data key", where: secretsWhere, fingerprint: sk.Fingerprint()},
		{name: "audit", what: "audit signing key", where: auditKeyPath(cfg), fingerprint: audit.KeyID(ak.Public().(ed25519.PublicKey)), replaces: earlier},
	}
	ek, err := st.AuditEntryKey(ctx)
	if err != nil || ek == nil {
		return keys, nil, err
	}
	h := sha256.New()
	h.Write([]byte("silas/audit-entry-key-fingerprint/v1\x00"))
	h.Write(ek.Key)
	return keys, &clusterKey{name: "audit_entry", what: "audit entry key", where: auditEntryKeyPath(cfg), fingerprint: hex.EncodeToString(h.Sum(nil)[:8])}, nil
}

// checkClusterKeys refuses to serve with keys other than the ones the
// database's first `silas serve` recorded: with several instances on one
// database, an approval signed by one must verify on every other, a secret
// sealed by one must open on every other, and the audit chain must stay
// under one key. An audit key rotated as docs/operations.md describes (the
// old public key kept in audit.pub) is recorded anew. The audit entry key
// is recorded too, but a different one only warns: the documented answer
// to losing it is a new one at the next start, and what it costs (the
// other key's rows named as not this gateway's by verify) is visible.
func checkClusterKeys(ctx context.Context, cfg *config.Config, st *store.Store, signing ed25519.PrivateKey, log *slog.Logger) error {
	keys, entry, err := clusterKeys(ctx, cfg, st, signing, log)
	if err != nil {
		return err
	}
	rec, err := claimKeys(ctx, st, keys)
	if err != nil {
		return err
	}
	var bad []string
	for _, k := range keys {
		r := rec[k.name]
		if r != k.fingerprint && slices.Contains(k.replaces, r) {
			// A rotation: forget the old key and record this one.
			if _, err := st.ForgetClusterKey(ctx, k.name); err != nil {
				return err
			}
			if rec, err = claimKeys(ctx, st, keys); err != nil {
				return err
			}
			log.Info("recorded the rotated key for the cluster", slog.String("key", k.what), slog.String("fingerprint", k.fingerprint), slog.String("replaces", r))
			r = rec[k.name]
		}
		if r != k.fingerprint {
			bad = append(bad, fmt.Sprintf("  - the %s (%s, fingerprint %s) is not the cluster's (fingerprint %s); `silas keys forget %s` forgets the cluster's",
				k.what, k.where, k.fingerprint, r, k.name))
		}
	}
	if len(bad) > 0 {
		return errors.New("serve: refusing to start: this instance's keys differ from the ones this database's first `silas serve` recorded:\n" +
			strings.Join(bad, "\n") + "\n" +
			"Every `silas serve` on one database must use the same key files. Give this instance the cluster's files (copy them from an\n" +
			"instance that runs, or mount the same secret; the paths are data_dir/keys, secrets.key_file and audit.key_file), or point it\n" +
			"at its own database. Only if the key was replaced on purpose on every instance: forget the old fingerprint as shown, then start.")
	}
	if entry != nil {
		rec, err := claimKeys(ctx, st, []clusterKey{*entry})
		if err != nil {
			return err
		}
		if r := rec[entry.name]; r != entry.fingerprint {
			log.Warn("the audit entry key is not the one the cluster recorded: `silas audit verify` on another instance names the rows this one appends as not written by the gateway; "+
				"give every instance the same entry.key (or `silas keys forget audit_entry` if this one replaces it everywhere)",
				slog.String("path", entry.where), slog.String("fingerprint", entry.fingerprint), slog.String("cluster", r))
		}
	}
	log.Debug("this instance's keys are the cluster's", slog.Int("keys", len(keys)))
	return nil
}

func claimKeys(ctx context.Context, st *store.Store, keys []clusterKey) (map[string]string, error) {
	fps := make(map[string]string, len(keys))
	for _, k := range keys {
		fps[k.name] = k.fingerprint
	}
	return st.ClaimClusterKeys(ctx, fps)
}

// clusterKeyNames are the names `keys forget` accepts.
var clusterKeyNames = []string{"signing", "secrets", "audit", "audit_entry"}

// cmdKeysForget forgets the fingerprint the cluster recorded for one key,
// after that key was replaced on purpose on every instance.
func cmdKeysForget(ctx context.Context, env *cliEnv, args []string) error {
	fs := flags(env, "keys forget", "keys forget NAME", "Forget the fingerprint this database recorded for one key ("+strings.Join(clusterKeyNames, ", ")+"),\n"+
		"after replacing that key on purpose on every instance; the next `silas serve` records its own.")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 || !slices.Contains(clusterKeyNames, fs.Arg(0)) {
		fs.Usage()
		return errUsage
	}
	return withStore(ctx, env, func(st *store.Store) error {
		ok, err := st.ForgetClusterKey(ctx, fs.Arg(0))
		if err != nil {
			return err
		}
		if !ok {
			fmt.Fprintf(env.stdout, "no fingerprint of the %s key was recorded\n", fs.Arg(0))
			return nil
		}
		fmt.Fprintf(env.stdout, "forgot the cluster's %s key; the next `silas serve` records its own\n", fs.Arg(0))
		return nil
	})
}
