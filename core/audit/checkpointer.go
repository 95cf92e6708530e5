package audit

import (
	"bytes"
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
	// AuditRows feeds f the rows from seq from to upto, in seq order, as
	// stored (MAC included, data not decoded); an error from f stops it.
	AuditRows(ctx context.Context, from, upto int64, f func(Row) error) error
	// NewestCheckpoint returns the newest stored checkpoint and the hash
	// of the log's row at its seq (nil when there is no such row); ok
	// false when no checkpoint is stored.
	NewestCheckpoint(ctx context.Context) (c Checkpoint, rowHash []byte, ok bool, err error)
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
	// EntryKey, when set, makes every checkpoint first check the rows it
	// is about to cover (since the previous checkpoint): chained, and each
	// from EntryKey.FromSeq on carrying a valid entry MAC. A row that fails
	// is never signed over (ErrUnsigned). nil checks nothing (tools and
	// tests); serve always sets it.
	EntryKey *EntryKey
	// Trusted are public keys, besides Key's own, whose checkpoints
	// SyncHead copies into the head file (audit.pub: keys rotated out).
	// Only the file decides what is trusted, never the database.
	Trusted []ed25519.PublicKey
	// FirstAtOnce: while no checkpoint is stored, one is due as soon as
	// there is an entry, so that the head file exists from the gateway's
	// first entries on and verify can fail closed without it (serve sets
	// it).
	FirstAtOnce bool
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
	// headSeq is the newest checkpoint known to be in the head file
	// (written here, or read from it); 0 before the first look.
	headSeq int64
	// reported is the newest checkpoint SyncHead logged a finding about,
	// so a finding is logged once, not at every heartbeat.
	reported int64
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
		force = force || c.opt.FirstAtOnce
	}
	if seq <= lastSeq {
		return nil, nil
	}
	now := c.opt.Now()
	if !force && seq-lastSeq < c.opt.Entries && now.Sub(lastAt) < c.opt.Interval {
		return nil, nil
	}
	if c.opt.EntryKey != nil {
		if err := c.checkRange(ctx, lastSeq, seq, hash); err != nil {
			c.opt.Logger.Error("audit checkpoint refused", slog.Int64("seq", seq), slog.Any("err", err))
			return nil, err
		}
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
		c.headSeq = max(c.headSeq, cp.Seq)
	}
	c.opt.Logger.Debug("audit checkpoint", slog.Int64("seq", seq), slog.String("key_id", cp.KeyID))
	return &cp, nil
}

// UnsignedError is the checkpointer's refusal to sign over a row that is
// not the gateway's or does not chain.
type UnsignedError struct {
	Problem Problem
	Upto    int64 // the checkpoint that was not made
}

func (e *UnsignedError) Error() string {
	return fmt.Sprintf("audit: checkpoint at seq %d not signed: %s", e.Upto, e.Problem.Message)
}

// checkRange checks the rows a checkpoint of seq upto (hash head) would
// newly cover, those after the previous checkpoint at seq last: each
// chained to the one before, hashed as stored, and MAC'd by this gateway.
// The row at last anchors the chain (it was covered before); with no
// previous checkpoint the walk starts at genesis.
func (c *Checkpointer) checkRange(ctx context.Context, last, upto int64, head []byte) error {
	m := c.opt.EntryKey.NewMACer()
	prev, next := Genesis, int64(1)
	anchored := last >= 1
	if anchored {
		next = last
	}
	refuse := func(seq int64, msg string) error {
		return &UnsignedError{Upto: upto, Problem: Problem{Kind: ProblemBrokenRow, Seq: seq, Message: msg}}
	}
	err := c.st.AuditRows(ctx, next, upto, func(r Row) error {
		if r.Seq != next {
			return refuse(next, fmt.Sprintf("entry %d is missing (the next row is %d)", next, r.Seq))
		}
		if anchored && r.Seq == last {
			prev, next = r.Hash, next+1
			return nil
		}
		if p, ok := EntryMACProblem(m, c.opt.EntryKey, r); !ok {
			return &UnsignedError{Upto: upto, Problem: p}
		}
		cn, err := Canonical(r.Seq, r.At, r.Entry.Kind, r.Entry.Actor, r.Entry.Conversation, r.DataJSON)
		if err != nil || !bytes.Equal(r.PrevHash, prev) || !bytes.Equal(Chain(prev, cn), r.Hash) {
			return refuse(r.Seq, fmt.Sprintf("entry %d does not chain to the one before it", r.Seq))
		}
		prev, next = r.Hash, next+1
		return nil
	})
	if err != nil {
		return err
	}
	if next != upto+1 || !bytes.Equal(prev, head) {
		return refuse(upto, fmt.Sprintf("the rows up to %d do not end at the head read before", upto))
	}
	return nil
}
