package audit

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Audit checkpoints: the audit key signs the newest entry's {seq, hash, at}
// every Entries entries, at least every Interval while entries arrive, and
// at a graceful stop. The checkpointer runs beside the store's writer,
// never in it: the group-commit path stays as it was, and a look costs two
// indexed reads plus, when a checkpoint is due, a signature, one INSERT and
// one fsync of the head file. Who calls RunOnce and how often is the
// background room's business (core/background); this file only decides
// whether one is due and signs it.

// CheckpointStore is the storage a Checkpointer needs (core/store
// implements it; the SQL stays there).
type CheckpointStore interface {
	// AuditHead returns the newest entry's seq and hash; seq 0 when the log
	// is empty.
	AuditHead(ctx context.Context) (seq int64, hash []byte, err error)
	// LatestCheckpoint returns the newest stored checkpoint's seq and time;
	// ok false when there is none.
	LatestCheckpoint(ctx context.Context) (seq int64, at time.Time, ok bool, err error)
	// InsertCheckpoint stores a checkpoint; one already stored for the same
	// seq is kept.
	InsertCheckpoint(ctx context.Context, c Checkpoint) error
}

// CheckpointOptions configure a Checkpointer.
type CheckpointOptions struct {
	// Key is the audit signing key. Required.
	Key ed25519.PrivateKey
	// HeadFile receives every checkpoint as a JSON line (AppendHead); ""
	// writes none.
	HeadFile string
	// Entries: a checkpoint is due once this many entries were appended
	// since the last (default 1000).
	Entries int64
	// Interval: a checkpoint is due this long after the last when entries
	// were appended meanwhile (default 60s).
	Interval time.Duration
	// MinInterval is how often RunOnce should be called, and so the most
	// often a checkpoint is made under load (default 1s, at most Interval).
	MinInterval time.Duration
	// Now is the clock (default time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

// Checkpointer signs checkpoints of the audit chain.
type Checkpointer struct {
	st  CheckpointStore
	opt CheckpointOptions

	mu sync.Mutex
	// since is when this checkpointer started: with no checkpoint stored
	// yet, the interval counts from it.
	since time.Time
}

// NewCheckpointer checks the options and that the store answers. It keeps
// no copy of the newest checkpoint: each look reads it from the store, so
// a checkpoint made by another process (a second instance, or a CLI) counts.
func NewCheckpointer(ctx context.Context, st CheckpointStore, opt CheckpointOptions) (*Checkpointer, error) {
	if len(opt.Key) != ed25519.PrivateKeySize {
		return nil, errors.New("audit: checkpointer: no audit key")
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
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if _, _, _, err := st.LatestCheckpoint(ctx); err != nil {
		return nil, err
	}
	return &Checkpointer{st: st, opt: opt, since: opt.Now()}, nil
}

// MinInterval is how often RunOnce is meant to run.
func (c *Checkpointer) MinInterval() time.Duration { return c.opt.MinInterval }

// RunOnce signs the newest entry if a checkpoint is due (Entries new
// entries, or Interval since the last with any new one). It returns nil
// when none was due.
func (c *Checkpointer) RunOnce(ctx context.Context) (*Checkpoint, error) {
	return c.checkpoint(ctx, false)
}

// Checkpoint signs the newest entry now if it is not signed yet (a
// graceful stop calls it last). It returns nil when there was nothing new.
func (c *Checkpointer) Checkpoint(ctx context.Context) (*Checkpoint, error) {
	return c.checkpoint(ctx, true)
}

func (c *Checkpointer) checkpoint(ctx context.Context, force bool) (*Checkpoint, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seq, hash, err := c.st.AuditHead(ctx)
	if err != nil || seq == 0 {
		return nil, err
	}
	lastSeq, lastAt, ok, err := c.st.LatestCheckpoint(ctx)
	if err != nil {
		return nil, err
	}
	if !ok {
		lastAt = c.since
	}
	if seq <= lastSeq {
		return nil, nil
	}
	now := c.opt.Now()
	if !force && seq-lastSeq < c.opt.Entries && now.Sub(lastAt) < c.opt.Interval {
		return nil, nil
	}
	cp, err := Sign(c.opt.Key, seq, hash, now)
	if err != nil {
		return nil, err
	}
	if err := c.st.InsertCheckpoint(ctx, cp); err != nil {
		return nil, fmt.Errorf("audit: checkpoint at seq %d: %w", seq, err)
	}
	if c.opt.HeadFile != "" {
		// After the database: a head the file has and the database lacks
		// reads as deleted checkpoint rows.
		if err := AppendHead(c.opt.HeadFile, cp); err != nil {
			return &cp, err
		}
	}
	c.opt.Logger.Debug("audit checkpoint", slog.Int64("seq", seq), slog.String("key_id", cp.KeyID))
	return &cp, nil
}
