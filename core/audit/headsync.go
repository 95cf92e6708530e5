package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"io/fs"
	"log/slog"
)

// The head file with several instances (issue 25). Checkpoints are signed
// by one instance at a time (whichever runs the periodic checkpoint job,
// River's leader), each into its own head file; an instance that never led
// would have none, and `silas audit verify` on its host could not catch
// checkpoint rows deleted along with the newest entries. So every instance
// copies the newest checkpoint the database holds into its own head file,
// after each heartbeat: every head file is an anchor, lagging the signer's
// by at most one heartbeat.
//
// The copy trusts nothing the database says. A line is appended only when
// its signature verifies under the audit key (this process's, or one in
// audit.pub), so someone who can write the database but lacks the audit
// key cannot put a head of their own into the file; and only when the log
// holds the signed hash at that seq, so a genuine checkpoint of another
// database signed with the same key is not taken. A head file that is
// ahead of the database (checkpoint rows deleted) or a newest checkpoint
// the log does not match (rows removed or changed) is logged as the
// finding it is; `silas audit verify` names it.

// SyncHead appends the newest checkpoint stored in the database to the
// head file when the file does not have it yet, and returns it (nil when
// nothing was appended). A head file shared by several instances
// (audit.head_file on a shared volume) gets each checkpoint about once:
// the file is read before appending. Findings (see above) are logged once
// each and return nil; an error means the database or the file could not
// be read or written.
func (c *Checkpointer) SyncHead(ctx context.Context) (*Checkpoint, error) {
	if c.opt.HeadFile == "" {
		return nil, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cp, rowHash, ok, err := c.st.NewestCheckpoint(ctx)
	if err != nil || !ok {
		return nil, err
	}
	if cp.Seq > c.headSeq {
		// Another instance signed it, or appended it to a shared file.
		h, err := ReadHead(c.opt.HeadFile)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		if h != nil {
			c.headSeq = max(c.headSeq, h.Seq)
		}
	}
	switch {
	case cp.Seq < c.headSeq:
		c.report(cp.Seq, "audit: the head file has a newer checkpoint than the database: checkpoint rows were deleted (run silas audit verify)",
			slog.Int64("database_newest", cp.Seq), slog.Int64("head_file_newest", c.headSeq), slog.String("head_file", c.opt.HeadFile))
		return nil, nil
	case cp.Seq == c.headSeq:
		return nil, nil
	}
	trusted := append([]ed25519.PublicKey{c.opt.Key.Public().(ed25519.PublicKey)}, c.opt.Trusted...)
	if err := cp.Verify(trusted); err != nil {
		c.report(cp.Seq, "audit: the database's newest checkpoint is not signed by a trusted audit key; not copied to the head file (run silas audit verify)",
			slog.Int64("seq", cp.Seq), slog.String("key_id", cp.KeyID), slog.Any("err", err))
		return nil, nil
	}
	if !bytes.Equal(rowHash, cp.Hash) {
		c.report(cp.Seq, "audit: the log does not hold the entry the newest checkpoint signed: entries were removed or changed; not copied to the head file (run silas audit verify)",
			slog.Int64("seq", cp.Seq), slog.Bool("entry_present", rowHash != nil))
		return nil, nil
	}
	if err := AppendHead(c.opt.HeadFile, cp); err != nil {
		return nil, err
	}
	c.headSeq = cp.Seq
	c.opt.Logger.Debug("audit head copied to the head file", slog.Int64("seq", cp.Seq), slog.String("head_file", c.opt.HeadFile))
	return &cp, nil
}

// report logs a finding about the checkpoint at seq once.
func (c *Checkpointer) report(seq int64, msg string, attrs ...any) {
	if c.reported == seq {
		return
	}
	c.reported = seq
	c.opt.Logger.Error(msg, attrs...)
}
