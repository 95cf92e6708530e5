package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/config"
)

// auditKeyPath is the audit signing key: audit.key_file, else
// data_dir/audit/audit.key — apart from data_dir/keys, so it can be kept
// (and backed up, and hidden) on its own. The sandbox must never see it.
func auditKeyPath(cfg *config.Config) string {
	if cfg.Audit.KeyFile != "" {
		return cfg.Audit.KeyFile
	}
	return filepath.Join(cfg.DataDir, "audit", "audit.key")
}

// auditPubPath is audit.public_key_file, else audit.pub next to the key.
func auditPubPath(cfg *config.Config) string {
	if cfg.Audit.PublicKeyFile != "" {
		return cfg.Audit.PublicKeyFile
	}
	return filepath.Join(filepath.Dir(auditKeyPath(cfg)), "audit.pub")
}

// auditEntryKeyPath is the audit entry key (core/audit/mac.go): entry.key
// next to the audit key, never in the database.
func auditEntryKeyPath(cfg *config.Config) string {
	return filepath.Join(filepath.Dir(auditKeyPath(cfg)), "entry.key")
}

// auditHeadPath is audit.head_file, else data_dir/audit/head.log.
func auditHeadPath(cfg *config.Config) string {
	if cfg.Audit.HeadFile != "" {
		return cfg.Audit.HeadFile
	}
	return filepath.Join(cfg.DataDir, "audit", "head.log")
}

// newCheckpointer loads (or creates) the audit key and returns serve's
// checkpointer.
func newCheckpointer(ctx context.Context, cfg *config.Config, st *store.Store, log *slog.Logger) (*audit.Checkpointer, error) {
	key, created, err := audit.LoadOrCreateKey(auditKeyPath(cfg), auditPubPath(cfg))
	if err != nil {
		return nil, err
	}
	id := audit.KeyID(key.Public().(ed25519.PublicKey))
	if created {
		log.Warn("created the audit signing key: back it up offline, apart from the database",
			slog.String("path", auditKeyPath(cfg)), slog.String("public_key", auditPubPath(cfg)), slog.String("key_id", id))
	}
	// The entry key now (made if need be, under the chain lock), so the
	// checkpointer checks every row's MAC before it signs over it.
	entryKey, err := st.AuditEntryKey(ctx)
	if err != nil {
		return nil, err
	}
	// Checkpoints signed by a key rotated out are copied to the head file
	// too (SyncHead); LoadOrCreateKey just made sure the file exists.
	trusted, err := audit.LoadPublicKeys(auditPubPath(cfg))
	if err != nil {
		return nil, err
	}
	cp, err := audit.NewCheckpointer(ctx, st, audit.CheckpointOptions{Key: key, HeadFile: auditHeadPath(cfg), EntryKey: entryKey, FirstAtOnce: true,
		Entries: int64(cfg.Audit.CheckpointEntries), Interval: cfg.Audit.CheckpointInterval.Duration, Trusted: trusted, Logger: log})
	if err != nil {
		return nil, err
	}
	// One look now rather than at the background room's first: after a
	// crash River elects a leader (who runs the periodic jobs) only once
	// the dead one's lease ran out, and a log that never got its first
	// checkpoint (FirstAtOnce) would go that long without a head file,
	// which verify treats as removed. A refusal (a row not written by this
	// gateway) is logged by RunOnce; the gateway still starts.
	if _, err := cp.RunOnce(ctx); err != nil {
		log.Error("audit checkpoint at start", slog.Any("err", err))
	}
	// With several instances another one may be signing: its newest
	// checkpoint goes into this instance's head file now, and after each
	// heartbeat (serve), so verify has an anchor on every host.
	if _, err := cp.SyncHead(ctx); err != nil {
		log.Error("audit head file at start", slog.Any("err", err))
	}
	return cp, nil
}

// finalCheckpoint signs the newest entry at a graceful stop.
func finalCheckpoint(cp *audit.Checkpointer, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := cp.Checkpoint(ctx)
	switch {
	case err != nil:
		log.Error("final audit checkpoint failed", slog.Any("err", err))
	case c != nil:
		log.Info("audit checkpoint", slog.Int64("seq", c.Seq), slog.String("key_id", c.KeyID))
	}
}

func cmdAudit(ctx context.Context, env *cliEnv, args []string) error {
	sub, rest := subcommand(args)
	switch sub {
	case "verify":
		return cmdAuditVerify(ctx, env, rest)
	case "tail":
		fs := flags(env, "audit tail", "audit tail [-n 20] [--conversation ID] [--json]", "Print the most recent audit entries, oldest first.")
		n := fs.Int("n", 20, "number of entries")
		conv := fs.String("conversation", "", "only this conversation (e.g. webchat:local)")
		asJSON := fs.Bool("json", false, "one JSON object per line")
		if err := parse(fs, rest); err != nil {
			return err
		}
		if *n < 1 || *n > 10000 {
			return fmt.Errorf("-n must be between 1 and 10000")
		}
		return withStore(ctx, env, func(st *store.Store) error {
			rows, err := st.AuditTail(ctx, *n, coreConversation(*conv), nil)
			if err != nil {
				return err
			}
			for _, r := range rows {
				if *asJSON {
					b, _ := json.Marshal(map[string]any{"seq": r.Seq, "at": r.At.UTC().Format(time.RFC3339Nano), "kind": r.Entry.Kind,
						"actor": r.Entry.Actor, "conversation": r.Entry.Conversation, "data": json.RawMessage(r.DataJSON), "hash": hex.EncodeToString(r.Hash)})
					fmt.Fprintln(env.stdout, string(b))
					continue
				}
				fmt.Fprintf(env.stdout, "%6d %s %-22s %-16s %-16s %s\n", r.Seq, r.At.Local().Format("2006-01-02 15:04:05"), r.Entry.Kind,
					r.Entry.Actor, r.Entry.Conversation, string(r.DataJSON))
			}
			return nil
		})
	default:
		fs := flags(env, "audit", "audit verify [--json] | audit tail [-n 20]", "verify  check the hash chain and its signed checkpoints (exit 1 naming the first problem)\ntail    print recent entries")
		if err := parse(fs, rest); err != nil {
			return err
		}
		fs.Usage()
		return errUsage
	}
}

func cmdAuditVerify(ctx context.Context, env *cliEnv, args []string) error {
	fl := flags(env, "audit verify", "audit verify [--json] [--pubkey FILE] [--head FILE]",
		"Walk the whole hash chain and check it against the signed checkpoints: every checkpoint's signature\n"+
			"(with the audit public key from a file, never from the database), that each one's seq and hash are in\n"+
			"the log, and that the newest head in the head file outside the database is there too. Names the first\n"+
			"broken row, a re-chained range, a truncated log or deleted checkpoints, and every entry whose MAC (under\n"+
			"the entry key next to the audit key) shows it was not written by this gateway. Once the audit public key\n"+
			"exists, a missing or empty head file, or a log past audit.checkpoint_entries with no checkpoint, fails it\n"+
			"too. Exit 0 when all is well, 1 on any problem (warnings, such as entries not yet covered by a\n"+
			"checkpoint, do not fail it).")
	asJSON := fl.Bool("json", false, "print the report as one JSON object (for monitoring)")
	pubkey := fl.String("pubkey", "", "audit public key file (default audit.public_key_file, else audit.pub next to audit.key_file)")
	head := fl.String("head", "", "head file (default audit.head_file, else data_dir/audit/head.log)")
	entryKeyFile := fl.String("entry-key", "", "audit entry key file (default entry.key next to the audit key)")
	if err := parse(fl, args); err != nil {
		return err
	}
	cfg, err := loadConfig(env)
	if err != nil {
		return err
	}
	if *pubkey == "" {
		*pubkey = auditPubPath(cfg)
	}
	if *head == "" {
		*head = auditHeadPath(cfg)
	}
	if *entryKeyFile == "" {
		*entryKeyFile = auditEntryKeyPath(cfg)
	}
	var warnings []string
	trusted, err := audit.LoadPublicKeys(*pubkey)
	if errors.Is(err, fs.ErrNotExist) {
		warnings = append(warnings, fmt.Sprintf("no audit public key at %s: checkpoint signatures cannot be checked", *pubkey))
	} else if err != nil {
		return err
	}
	headState := audit.HeadPresent
	headLines, err := audit.ReadHeadLines(*head)
	headCP := audit.NewestHead(headLines)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		headState = audit.HeadMissing
		if len(trusted) == 0 {
			warnings = append(warnings, fmt.Sprintf("no head file at %s: deleted checkpoint rows cannot be detected", *head))
		}
	case err != nil:
		return err
	case headCP == nil:
		headState = audit.HeadEmpty
		if len(trusted) == 0 {
			warnings = append(warnings, fmt.Sprintf("head file %s holds no checkpoint: deleted checkpoint rows cannot be detected", *head))
		}
	}
	// Entry MACs need the entry key, which only the gateway's host has.
	entryKey, err := audit.LoadEntryKey(*entryKeyFile)
	if errors.Is(err, fs.ErrNotExist) {
		entryKey = nil
		warnings = append(warnings, fmt.Sprintf("no audit entry key at %s: entries were not checked for rows written by someone other than the gateway (run verify on the gateway's host)", *entryKeyFile))
	} else if err != nil {
		return err
	}
	return withStore(ctx, env, func(st *store.Store) error {
		rep, err := st.VerifyAuditAnchored(ctx, trusted, headCP, *head, entryKey, headLines...)
		if err != nil {
			return err
		}
		if len(trusted) > 0 {
			// The public key exists, so checkpoints are being made: their
			// absence is a finding, not a fresh install.
			threshold := int64(cfg.Audit.CheckpointEntries)
			if threshold <= 0 {
				threshold = 1000
			}
			rep.FailClosed(headState, *head, threshold)
		}
		rep.Warnings = append(warnings, rep.Warnings...)
		if *asJSON {
			b, err := json.Marshal(struct {
				OK bool `json:"ok"`
				*audit.Report
				PublicKeyFile string `json:"public_key_file"`
				HeadFile      string `json:"head_file"`
			}{rep.OK(), rep, *pubkey, *head})
			if err != nil {
				return err
			}
			fmt.Fprintln(env.stdout, string(b))
			if !rep.OK() {
				return &exitError{code: 1, msg: fmt.Sprintf("audit verify: %d problem(s) found", len(rep.Problems))}
			}
			return nil
		}
		for _, w := range rep.Warnings {
			fmt.Fprintf(env.stderr, "warning: %s\n", w)
		}
		if rep.OK() {
			fmt.Fprintf(env.stdout, "audit chain intact: %d entries verified", rep.Entries)
			if rep.NewestCheckpoint > 0 {
				fmt.Fprintf(env.stdout, "; %d signed checkpoint(s), the newest at seq %d", rep.Checkpoints, rep.NewestCheckpoint)
			}
			fmt.Fprintln(env.stdout)
			return nil
		}
		var lines []string
		for _, p := range rep.Problems {
			if p.Kind == audit.ProblemBrokenRow {
				be := rep.Broken()
				lines = append(lines, fmt.Sprintf("audit chain BROKEN at seq %d: %s (%d rows before it verified)", be.Seq, be.Reason, rep.Entries))
				continue
			}
			lines = append(lines, "audit PROBLEM: "+p.Message)
		}
		return &exitError{code: 1, msg: strings.Join(lines, "\n")}
	})
}
