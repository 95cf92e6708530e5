package store

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/core/audit"
)

// Audit checkpoints: the audit key signs the newest entry's {seq, hash, at}
// every Entries entries, at least every Interval while entries arrive, and
// at a graceful stop. The checkpointer runs beside the writer, never in it:
// the group-commit path stays as it was, and checkpointing costs one indexed
// read per MinInterval plus, when one is due, a signature, one INSERT and
// one fsync of the head file.

// CheckpointOptions configure a Checkpointer.
type CheckpointOptions struct {
	// Key is the audit signing key. Required.
	Key ed25519.PrivateKey
	// HeadFile receives every checkpoint as a JSON line (audit.AppendHead);
	// "" writes none.
	HeadFile string
	// Entries: a checkpoint is due once this many entries were appended
	// since the last (default 1000).
	Entries int64
	// Interval: a checkpoint is due this long after the last when entries
	// were appended meanwhile (default 60s).
	Interval time.Duration
	// MinInterval is how often the head is looked at, and so the most often
	// a checkpoint is made under load (default 1s, at most Interval).
	MinInterval time.Duration
	Logger      *slog.Logger
}

// Checkpointer signs checkpoints of the audit chain.
type Checkpointer struct {
	s   *Store
	opt CheckpointOptions

	mu      sync.Mutex
	lastSeq int64
	lastAt  time.Time
}

// NewCheckpointer starts from the newest checkpoint in the database.
func (s *Store) NewCheckpointer(ctx context.Context, opt CheckpointOptions) (*Checkpointer, error) {
	if len(opt.Key) != ed25519.PrivateKeySize {
		return nil, errors.New("store: checkpointer: no audit key")
	}
	if opt.Entries <= 0 {
		opt.Entries = 1000
	}
	if opt.Interval <= 0 {
		opt.Interval = time.Minute
	}
	if opt.MinInterval <= 0 {
		opt.MinInterval = time.Second
	}
	opt.MinInterval = min(opt.MinInterval, opt.Interval)
	if opt.Logger == nil {
		opt.Logger = s.log
	}
	c := &Checkpointer{s: s, opt: opt}
	err := s.pool.QueryRow(ctx, `SELECT seq, at FROM audit_checkpoints ORDER BY seq DESC LIMIT 1`).Scan(&c.lastSeq, &c.lastAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		c.lastAt = s.now() // the interval counts from now
	case err != nil:
		return nil, fmt.Errorf("store: newest audit checkpoint: %w", err)
	}
	return c, nil
}

// Run makes checkpoints as they fall due until ctx ends. Errors are logged
// and retried at the next look: the chain itself does not depend on them.
func (c *Checkpointer) Run(ctx context.Context) {
	t := time.NewTicker(c.opt.MinInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := c.checkpoint(ctx, false); err != nil && ctx.Err() == nil {
			c.opt.Logger.Error("audit checkpoint failed", slog.Any("err", err))
		}
	}
}

// Checkpoint signs the newest entry now if it is not signed yet (a
// graceful stop calls it last). It returns nil when there was nothing new.
func (c *Checkpointer) Checkpoint(ctx context.Context) (*audit.Checkpoint, error) {
	return c.checkpoint(ctx, true)
}

func (c *Checkpointer) checkpoint(ctx context.Context, force bool) (*audit.Checkpoint, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var seq int64
	var hash []byte
	err := c.s.pool.QueryRow(ctx, `SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1`).Scan(&seq, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: audit head: %w", err)
	}
	if seq <= c.lastSeq {
		return nil, nil
	}
	now := c.s.now()
	if !force && seq-c.lastSeq < c.opt.Entries && now.Sub(c.lastAt) < c.opt.Interval {
		return nil, nil
	}
	cp, err := audit.Sign(c.opt.Key, seq, hash, now)
	if err != nil {
		return nil, err
	}
	if err := c.s.InsertCheckpoint(ctx, cp); err != nil {
		return nil, err
	}
	c.lastSeq, c.lastAt = seq, cp.At
	if c.opt.HeadFile != "" {
		// After the database: a head the file has and the database lacks
		// reads as deleted checkpoint rows.
		if err := audit.AppendHead(c.opt.HeadFile, cp); err != nil {
			return &cp, err
		}
	}
	c.opt.Logger.Debug("audit checkpoint", slog.Int64("seq", seq), slog.String("key_id", cp.KeyID))
	return &cp, nil
}

// InsertCheckpoint stores a signed checkpoint; one already stored for the
// same seq is kept.
func (s *Store) InsertCheckpoint(ctx context.Context, c audit.Checkpoint) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO audit_checkpoints (seq, hash, at, signature, key_id) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (seq) DO NOTHING`, c.Seq, c.Hash, c.At, c.Signature, c.KeyID)
	if err != nil {
		return fmt.Errorf("store: insert audit checkpoint: %w", err)
	}
	return nil
}

// AuditCheckpoints returns every stored checkpoint, oldest first.
func (s *Store) AuditCheckpoints(ctx context.Context) ([]audit.Checkpoint, error) {
	rows, err := s.pool.Query(ctx, `SELECT seq, hash, at, signature, key_id FROM audit_checkpoints ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("store: audit checkpoints: %w", err)
	}
	defer rows.Close()
	var out []audit.Checkpoint
	for rows.Next() {
		var c audit.Checkpoint
		if err := rows.Scan(&c.Seq, &c.Hash, &c.At, &c.Signature, &c.KeyID); err != nil {
			return nil, fmt.Errorf("store: scan audit checkpoint: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: audit checkpoints: %w", err)
	}
	return out, nil
}

// VerifyAuditAnchored walks the whole chain and compares it with the
// signed checkpoints (the database's, and head, the newest from the head
// file, named headName in messages), trusting only signatures by the keys
// in trusted. Problems are in the report; an error means the check could
// not run.
func (s *Store) VerifyAuditAnchored(ctx context.Context, trusted []ed25519.PublicKey, head *audit.Checkpoint, headName string) (*audit.Report, error) {
	cps, err := s.AuditCheckpoints(ctx)
	if err != nil {
		return nil, err
	}
	chk := audit.NewCheck(trusted, cps, head, headName)
	if err := s.walkAudit(ctx, func(r audit.Row) bool { chk.Row(r); return true }); err != nil {
		return nil, err
	}
	return chk.Finish(), nil
}

// walkAudit feeds every row to f in seq order, a page at a time, until f
// returns false.
func (s *Store) walkAudit(ctx context.Context, f func(audit.Row) bool) error {
	const page = 5000
	// From the lowest possible seq: a row slipped in below 1 is reported
	// (as a gap before seq 1), not skipped.
	after := int64(math.MinInt64)
	for {
		rows, err := s.pool.Query(ctx, `SELECT seq, at, kind, actor, conversation, data::text, prev_hash, hash FROM audit_log
			WHERE seq > $1 ORDER BY seq LIMIT $2`, after, page)
		if err != nil {
			return fmt.Errorf("store: audit verify: %w", err)
		}
		n := 0
		for rows.Next() {
			r, err := scanAuditRaw(rows)
			if err != nil {
				rows.Close()
				return err
			}
			n++
			after = r.Seq
			if !f(r) {
				rows.Close()
				return nil
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("store: audit verify: %w", err)
		}
		if n < page {
			return nil
		}
	}
}
