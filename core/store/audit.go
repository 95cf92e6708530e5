package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

// AuditTail returns the last n rows, oldest first (conversation filter
// optional, kinds filter optional).
func (s *Store) AuditTail(ctx context.Context, n int, conv core.ConversationID, kinds []audit.Kind) ([]audit.Row, error) {
	ks := make([]string, len(kinds))
	for i, k := range kinds {
		ks[i] = string(k)
	}
	rows, err := s.pool.Query(ctx, `SELECT * FROM (SELECT seq, at, kind, actor, conversation, data::text, prev_hash, hash FROM audit_log
		WHERE ($2 = '' OR conversation = $2) AND (COALESCE(cardinality($3::text[]), 0) = 0 OR kind = ANY($3)) ORDER BY seq DESC LIMIT $1) t ORDER BY seq`, n, conv, ks)
	if err != nil {
		return nil, fmt.Errorf("store: audit tail: %w", err)
	}
	defer rows.Close()
	return collectAudit(rows)
}

func collectAudit(rows pgx.Rows) ([]audit.Row, error) {
	return pgx.CollectRows(rows, scanAudit)
}

func scanAudit(rows pgx.CollectableRow) (audit.Row, error) {
	var r audit.Row
	var data string
	if err := rows.Scan(&r.Seq, &r.At, &r.Entry.Kind, &r.Entry.Actor, &r.Entry.Conversation, &data, &r.PrevHash, &r.Hash); err != nil {
		return r, fmt.Errorf("store: scan audit row: %w", err)
	}
	r.DataJSON = []byte(data)
	if err := json.Unmarshal(r.DataJSON, &r.Entry.Data); err != nil {
		return r, fmt.Errorf("store: decode audit row %d: %w", r.Seq, err)
	}
	return r, nil
}

// VerifyAudit walks the whole chain in order. It returns the number of rows
// checked and a *audit.BrokenError naming the first bad row. It checks the
// chain only; VerifyAuditAnchored also checks the signed checkpoints.
func (s *Store) VerifyAudit(ctx context.Context) (int64, error) {
	v := audit.NewVerifier()
	var broken error
	err := s.walkAudit(ctx, func(r audit.Row) bool {
		broken = v.Check(r)
		return broken == nil
	})
	if err != nil {
		return v.Checked, err
	}
	return v.Checked, broken
}

// scanAuditRaw does not decode data: verification hashes it as stored, so
// even a row whose data no longer parses is reported as broken, not skipped.
func scanAuditRaw(rows pgx.Rows) (audit.Row, error) {
	var r audit.Row
	var data string
	if err := rows.Scan(&r.Seq, &r.At, &r.Entry.Kind, &r.Entry.Actor, &r.Entry.Conversation, &data, &r.PrevHash, &r.Hash); err != nil {
		return r, fmt.Errorf("store: scan audit row: %w", err)
	}
	r.DataJSON = []byte(data)
	return r, nil
}

// scanAuditMAC is scanAuditRaw with the entry MAC (a ninth column).
func scanAuditMAC(rows pgx.Rows) (audit.Row, error) {
	var r audit.Row
	var data string
	if err := rows.Scan(&r.Seq, &r.At, &r.Entry.Kind, &r.Entry.Actor, &r.Entry.Conversation, &data, &r.PrevHash, &r.Hash, &r.MAC); err != nil {
		return r, fmt.Errorf("store: scan audit row: %w", err)
	}
	r.DataJSON = []byte(data)
	return r, nil
}

// auditEntryKey returns the entry key for an append whose chain head,
// read under the chain lock, is head: loaded from Options.EntryKeyFile,
// or made there MACing from head+1 on. nil when the store MACs nothing.
func (s *Store) auditEntryKey(head int64) (*audit.EntryKey, error) {
	if s.entryKeyFile == "" {
		return nil, nil
	}
	s.entryKeyMu.Lock()
	defer s.entryKeyMu.Unlock()
	if s.entryKey != nil {
		return s.entryKey, nil
	}
	k, created, err := audit.LoadOrCreateEntryKey(s.entryKeyFile, head)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if created {
		s.log.Warn("created the audit entry key: entries from here on carry its MAC; back it up with the audit key, apart from the database",
			slog.String("path", s.entryKeyFile), slog.Int64("from_seq", k.FromSeq))
	}
	s.entryKey = k
	return k, nil
}

// entryKeyLoaded reports whether appending needs no entry key to be
// loaded or made first (none configured, or loaded already).
func (s *Store) entryKeyLoaded() bool {
	if s.entryKeyFile == "" {
		return true
	}
	s.entryKeyMu.Lock()
	defer s.entryKeyMu.Unlock()
	return s.entryKey != nil
}

// AuditEntryKey loads (or makes) the entry key now, under the chain lock,
// so that serve's checkpointer has it before the first append. nil when
// the store was opened without Options.EntryKeyFile.
func (s *Store) AuditEntryKey(ctx context.Context) (*audit.EntryKey, error) {
	if s.entryKeyFile == "" {
		return nil, nil
	}
	s.entryKeyMu.Lock()
	k := s.entryKey
	s.entryKeyMu.Unlock()
	if k != nil {
		return k, nil
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: audit entry key: %w", err)
	}
	defer tx.Rollback(context.Background())
	var head int64
	err = tx.QueryRow(ctx, `SELECT pg_advisory_xact_lock($1), COALESCE((SELECT max(seq) FROM audit_log), 0)`, int64(auditLockKey)).Scan(nil, &head)
	if err != nil {
		return nil, fmt.Errorf("store: audit entry key: %w", err)
	}
	return s.auditEntryKey(head)
}

// auditAppendSQL appends a transaction's entries to the chain (the writer,
// under the chain lock): one row per element of its arrays, in order.
const auditAppendSQL = `INSERT INTO audit_log (seq, at, kind, actor, conversation, data, prev_hash, hash, mac)
	SELECT * FROM unnest($1::bigint[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::jsonb[], $7::bytea[], $8::bytea[], $9::bytea[])`

// auditHeadCheckSQL, after auditAppendSQL, makes the append its own check
// that the chain's last entry is still ($10, $11) — the head the writer's
// last commit left, not read in this transaction: another process may
// have appended since. The check is an uncorrelated subquery, so
// PostgreSQL runs it once, before the first row is inserted (an InitPlan
// under the Result's one-time filter); a moved head is a division by
// zero that fails the transaction before anything commits (staleHead).
// It is read with the statement's snapshot, taken after the chain lock's
// statement returned, so it sees every append committed before the lock
// was granted — as the separate head check it replaces did, one
// statement fewer per transaction.
const auditHeadCheckSQL = `
	WHERE 1 / (SELECT count(*)::int FROM (SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1) l
		WHERE l.seq = $10 AND l.hash = $11) = 1`

// staleHead reads the result of a checked append (auditHeadCheckSQL): its
// division by zero becomes errStaleHead, and the writer runs the batch
// again reading the head.
func staleHead(br pgx.BatchResults) error {
	_, err := br.Exec()
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "22012" { // division_by_zero: the check
		return fmt.Errorf("%w (%v)", errStaleHead, err)
	}
	return err
}
