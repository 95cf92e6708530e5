package store

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/core/audit"
)

// Audit checkpoints: signing them, the head file and when one is due live
// in core/audit (Checkpointer); the rows live here.

// AuditHead returns the newest audit entry's seq and hash; seq 0 when the
// log is empty.
func (s *Store) AuditHead(ctx context.Context) (int64, []byte, error) {
	var seq int64
	var hash []byte
	err := s.pool.QueryRow(ctx, `SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1`).Scan(&seq, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, fmt.Errorf("store: audit head: %w", err)
	}
	return seq, hash, nil
}

// LatestCheckpoint returns the newest stored checkpoint's seq and time;
// ok is false when there is none.
func (s *Store) LatestCheckpoint(ctx context.Context) (seq int64, at time.Time, ok bool, err error) {
	err = s.pool.QueryRow(ctx, `SELECT seq, at FROM audit_checkpoints ORDER BY seq DESC LIMIT 1`).Scan(&seq, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, time.Time{}, false, nil
	}
	if err != nil {
		return 0, time.Time{}, false, fmt.Errorf("store: newest audit checkpoint: %w", err)
	}
	return seq, at, true, nil
}

var _ audit.CheckpointStore = (*Store)(nil)

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

// NewestCheckpoint returns the newest stored checkpoint and the hash of
// the log's row at its seq (nil when that row is missing); ok is false
// when there is none. Every instance copies it to its head file
// (audit.Checkpointer.SyncHead).
func (s *Store) NewestCheckpoint(ctx context.Context) (c audit.Checkpoint, rowHash []byte, ok bool, err error) {
	err = s.pool.QueryRow(ctx, `SELECT c.seq, c.hash, c.at, c.signature, c.key_id, l.hash FROM audit_checkpoints c
		LEFT JOIN audit_log l ON l.seq = c.seq ORDER BY c.seq DESC LIMIT 1`).Scan(&c.Seq, &c.Hash, &c.At, &c.Signature, &c.KeyID, &rowHash)
	if errors.Is(err, pgx.ErrNoRows) {
		return audit.Checkpoint{}, nil, false, nil
	}
	if err != nil {
		return audit.Checkpoint{}, nil, false, fmt.Errorf("store: newest audit checkpoint: %w", err)
	}
	return c, rowHash, true, nil
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
// in trusted, and, with entryKey, every row's entry MAC from its FromSeq
// on; older are the head file's other lines, compared as head is.
// Problems are in the report; an error means the check could not run.
func (s *Store) VerifyAuditAnchored(ctx context.Context, trusted []ed25519.PublicKey, head *audit.Checkpoint, headName string, entryKey *audit.EntryKey, older ...audit.Checkpoint) (*audit.Report, error) {
	cps, err := s.AuditCheckpoints(ctx)
	if err != nil {
		return nil, err
	}
	chk := audit.NewCheck(trusted, cps, head, headName, older...).WithEntryKey(entryKey)
	if err := s.walkAudit(ctx, func(r audit.Row) bool { chk.Row(r); return true }); err != nil {
		return nil, err
	}
	return chk.Finish(), nil
}

// walkAudit feeds every row to f in seq order, a page at a time, until f
// returns false.
func (s *Store) walkAudit(ctx context.Context, f func(audit.Row) bool) error {
	// From the lowest possible seq: a row slipped in below 1 is reported
	// (as a gap before seq 1), not skipped.
	return s.walkAuditRange(ctx, math.MinInt64, math.MaxInt64, f)
}

// AuditRows feeds f the rows with from <= seq <= upto in seq order, as
// stored; the Checkpointer checks them before it signs (audit.CheckpointStore).
func (s *Store) AuditRows(ctx context.Context, from, upto int64, f func(audit.Row) error) error {
	var ferr error
	err := s.walkAuditRange(ctx, from-1, upto, func(r audit.Row) bool {
		ferr = f(r)
		return ferr == nil
	})
	if err != nil {
		return err
	}
	return ferr
}

// walkAuditRange feeds f the rows after < seq <= upto in seq order, a page
// at a time, until f returns false.
func (s *Store) walkAuditRange(ctx context.Context, after, upto int64, f func(audit.Row) bool) error {
	const page = 5000
	for {
		rows, err := s.pool.Query(ctx, `SELECT seq, at, kind, actor, conversation, data::text, prev_hash, hash, mac FROM audit_log
			WHERE seq > $1 AND seq <= $2 ORDER BY seq LIMIT $3`, after, upto, page)
		if err != nil {
			return fmt.Errorf("store: audit verify: %w", err)
		}
		n := 0
		for rows.Next() {
			r, err := scanAuditMAC(rows)
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
