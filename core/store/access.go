package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/core"
)

const accessSelect = `SELECT id, channel, identity, name, conversation, code, owner_conversation, status, created_at, COALESCE(decided_by, '') FROM access_requests`

func scanAccess(row pgx.Row) (core.AccessRequest, error) {
	var r core.AccessRequest
	err := row.Scan(&r.ID, &r.Channel, &r.Identity, &r.Name, &r.Conversation, &r.Code, &r.OwnerConversation, &r.Status, &r.CreatedAt, &r.DecidedBy)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, core.ErrNotFound
	}
	if err != nil {
		return r, fmt.Errorf("store: access request: %w", err)
	}
	return r, nil
}

// OpenAccessRequest returns the identity's pending request, locked.
func (t *Tx) OpenAccessRequest(ctx context.Context, id core.IdentityID) (core.AccessRequest, error) {
	return scanAccess(t.queryRow(ctx, accessSelect+` WHERE identity = $1 AND status = 'pending' FOR UPDATE`, id))
}

// GetAccessRequest reads a request by id, locked.
func (t *Tx) GetAccessRequest(ctx context.Context, id string) (core.AccessRequest, error) {
	return scanAccess(t.queryRow(ctx, accessSelect+` WHERE id = $1 FOR UPDATE`, id))
}

// InsertAccessRequest stores a new pending request.
func (t *Tx) InsertAccessRequest(ctx context.Context, r core.AccessRequest) error {
	_, err := t.exec(ctx, `INSERT INTO access_requests (id, channel, identity, name, conversation, code, owner_conversation, status, created_at)
		VALUES ($1,$2,$3,$4,$5,$6,$7,'pending',$8)`, r.ID, r.Channel, r.Identity, r.Name, r.Conversation, r.Code, r.OwnerConversation, t.now())
	if err != nil {
		return fmt.Errorf("store: insert access request: %w", err)
	}
	return nil
}

// DecideAccessRequest moves a pending request to allowed or denied
// (compare-and-swap; ok=false means it was already decided).
func (t *Tx) DecideAccessRequest(ctx context.Context, id string, status core.AccessStatus, by core.IdentityID) (bool, error) {
	tag, err := t.exec(ctx, `UPDATE access_requests SET status = $2, decided_by = $3, decided_at = $4 WHERE id = $1 AND status = 'pending'`,
		id, status, by, t.now())
	if err != nil {
		return false, fmt.Errorf("store: decide access request: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// QueuePairingCode stores the hash of a one-time pairing code.
func (t *Tx) QueuePairingCode(codeHash []byte, role, platform string, expires time.Time) {
	t.later("insert pairing code", `INSERT INTO pairing_codes (code_hash, role, platform, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)`,
		codeHash, role, platform, t.now(), expires)
}

// UsePairingCode consumes a code for identity. ok=false: unknown, used,
// expired, or for another platform.
func (t *Tx) UsePairingCode(ctx context.Context, codeHash []byte, identity core.IdentityID) (role string, ok bool, err error) {
	err = t.queryRow(ctx, `UPDATE pairing_codes SET used_at = $2, used_by = $3
		WHERE code_hash = $1 AND used_at IS NULL AND expires_at > $2 AND (platform = '' OR platform = $4)
		RETURNING role`, codeHash, t.now(), identity, identity.Platform()).Scan(&role)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("store: use pairing code: %w", err)
	}
	return role, true, nil
}

// QueueBinding stores (or replaces) a signed identity binding.
func (t *Tx) QueueBinding(identity core.IdentityID, role string, record, sig []byte) {
	t.later("upsert binding", `INSERT INTO identity_bindings (identity, role, record, signature, created_at) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (identity) DO UPDATE SET role = EXCLUDED.role, record = EXCLUDED.record, signature = EXCLUDED.signature, created_at = EXCLUDED.created_at`,
		identity, role, record, sig, t.now())
}

// Bindings lists all identity bindings.
func (s *Store) Bindings(ctx context.Context) ([]core.Binding, error) {
	rows, err := s.pool.Query(ctx, `SELECT identity, role, record, signature FROM identity_bindings`)
	if err != nil {
		return nil, fmt.Errorf("store: bindings: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[core.Binding])
	if err != nil {
		return nil, fmt.Errorf("store: bindings: %w", err)
	}
	return out, nil
}
