package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

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
