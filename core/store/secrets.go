package store

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/secrets"
)

// Secrets: only sealed values (secrets.Sealer output) and request metadata
// are stored. No method here takes or returns a plaintext value, and audit
// entries carry names and refs only.

// SecretsWebActor is the audit actor of a value stored through the secure
// form: whoever held the link, which the gateway cannot name.
const SecretsWebActor = "secrets-web"

const secretRequestSelect = `SELECT ref, name, label, hint, requester, conversation, channel, token_hash, status, created_at, expires_at
	FROM secret_requests`

func scanSecretRequest(row pgx.Row) (secrets.Request, error) {
	var r secrets.Request
	err := row.Scan(&r.Ref, &r.Name, &r.Label, &r.Hint, &r.Requester, &r.Conversation, &r.Channel, &r.TokenHash, &r.Status, &r.CreatedAt, &r.ExpiresAt)
	if err != nil {
		return secrets.Request{}, notFound(err)
	}
	return r, nil
}

// InsertSecretRequest stores a new pending request (built by
// secrets.NewRequest: r.TokenHash is the sha256 of the link token) and
// returns its audit entry, secret.requested.
func (t *Tx) InsertSecretRequest(ctx context.Context, r secrets.Request) ([]audit.Entry, error) {
	if err := secrets.ValidateName(r.Name); err != nil {
		return nil, err
	}
	if r.Status == "" {
		r.Status = secrets.StatusPending
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = t.now()
	}
	if !r.ExpiresAt.After(r.CreatedAt) {
		return nil, fmt.Errorf("store: secret request %s expires before it is created", r.Ref)
	}
	_, err := t.exec(ctx, `INSERT INTO secret_requests (ref, name, label, hint, requester, conversation, channel, token_hash, status, created_at, expires_at)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11)`,
		r.Ref, r.Name, r.Label, r.Hint, r.Requester, r.Conversation, r.Channel, r.TokenHash, r.Status, r.CreatedAt, r.ExpiresAt)
	if err != nil {
		return nil, fmt.Errorf("store: insert secret request: %w", err)
	}
	return []audit.Entry{{Kind: audit.KindSecretRequested, Actor: string(r.Requester), Conversation: string(r.Conversation), Data: map[string]any{
		"name": r.Name, "ref": r.Ref, "channel": string(r.Channel), "expires_at": audit.Truncate(r.ExpiresAt).Format(audit.TimeFormat),
	}}}, nil
}

// FulfillSecretRequest stores ciphertext (sealed for the request's name) if
// the request ref is pending, not expired and tokenHash matches, and marks
// the request fulfilled — compare-and-swap, so a link works once. A secret
// of the same name is replaced (rotation). Anything but OutcomeStored is an
// answer, not an error, and changes nothing; req is returned for
// OutcomeStored, OutcomeAlreadyFulfilled and OutcomeExpired only (never to
// a caller without the token).
func (t *Tx) FulfillSecretRequest(ctx context.Context, ref string, tokenHash, ciphertext []byte) (secrets.Outcome, secrets.Request, []audit.Entry, error) {
	now := t.now()
	r, err := scanSecretRequest(t.queryRow(ctx, secretRequestSelect+` WHERE ref = $1 FOR UPDATE`, ref))
	if errors.Is(err, core.ErrNotFound) {
		return secrets.OutcomeNotFound, secrets.Request{}, nil, nil
	}
	if err != nil {
		return 0, secrets.Request{}, nil, fmt.Errorf("store: secret request: %w", err)
	}
	if len(tokenHash) != len(r.TokenHash) || subtle.ConstantTimeCompare(tokenHash, r.TokenHash) != 1 {
		return secrets.OutcomeWrongToken, secrets.Request{}, nil, nil
	}
	switch r.StateAt(now) {
	case secrets.StatusFulfilled:
		return secrets.OutcomeAlreadyFulfilled, r, nil, nil
	case secrets.StatusExpired:
		// The sweeper (ExpireSecretRequests) marks it and updates the card.
		return secrets.OutcomeExpired, r, nil, nil
	}
	tag, err := t.exec(ctx, `UPDATE secret_requests SET status = 'fulfilled', fulfilled_at = $2
		WHERE ref = $1 AND status = 'pending' AND expires_at > $2 AND token_hash = $3`, ref, now, tokenHash)
	if err != nil {
		return 0, secrets.Request{}, nil, fmt.Errorf("store: fulfil secret request: %w", err)
	}
	if tag.RowsAffected() != 1 {
		// Unreachable while the row is locked; answer as a used link.
		return secrets.OutcomeAlreadyFulfilled, r, nil, nil
	}
	var inserted bool
	err = t.queryRow(ctx, `INSERT INTO secrets (name, ciphertext, created_at, updated_at) VALUES ($1, $2, $3, $3)
		ON CONFLICT (name) DO UPDATE SET ciphertext = EXCLUDED.ciphertext, updated_at = EXCLUDED.updated_at
		RETURNING (xmax = 0)`, r.Name, ciphertext, now).Scan(&inserted)
	if err != nil {
		return 0, secrets.Request{}, nil, fmt.Errorf("store: store secret %s: %w", r.Name, err)
	}
	r.Status = secrets.StatusFulfilled
	return secrets.OutcomeStored, r, []audit.Entry{{Kind: audit.KindSecretStored, Actor: SecretsWebActor, Conversation: string(r.Conversation), Data: map[string]any{
		"name": r.Name, "ref": r.Ref, "requester": string(r.Requester), "rotated": !inserted,
	}}}, nil
}

// ExpireSecretRequests marks up to limit pending requests past their expiry
// as expired and returns them (to update their cards) with one
// secret.expired entry each.
func (t *Tx) ExpireSecretRequests(ctx context.Context, limit int) ([]secrets.Request, []audit.Entry, error) {
	rows, err := t.query(ctx, `UPDATE secret_requests SET status = 'expired'
		WHERE ref IN (SELECT ref FROM secret_requests WHERE status = 'pending' AND expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)
		RETURNING ref, name, label, hint, requester, conversation, channel, token_hash, status, created_at, expires_at`, t.now(), limit)
	if err != nil {
		return nil, nil, fmt.Errorf("store: expire secret requests: %w", err)
	}
	defer rows.Close()
	var out []secrets.Request
	var entries []audit.Entry
	for rows.Next() {
		r, err := scanSecretRequest(rows)
		if err != nil {
			return nil, nil, fmt.Errorf("store: expire secret requests: %w", err)
		}
		out = append(out, r)
		entries = append(entries, audit.Entry{Kind: audit.KindSecretExpired, Actor: "silas", Conversation: string(r.Conversation),
			Data: map[string]any{"name": r.Name, "ref": r.Ref}})
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("store: expire secret requests: %w", err)
	}
	return out, entries, nil
}

// DeleteSecret removes a stored secret. ok=false means there was none (an
// answer: no entry is returned).
func (t *Tx) DeleteSecret(ctx context.Context, name string, actor core.IdentityID, conv core.ConversationID) (bool, []audit.Entry, error) {
	tag, err := t.exec(ctx, `DELETE FROM secrets WHERE name = $1`, name)
	if err != nil {
		return false, nil, fmt.Errorf("store: delete secret %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil, nil
	}
	return true, []audit.Entry{{Kind: audit.KindSecretDeleted, Actor: string(actor), Conversation: string(conv), Data: map[string]any{"name": name}}}, nil
}

// GetSecretRequest reads a request by ref (core.ErrNotFound if none).
func (s *Store) GetSecretRequest(ctx context.Context, ref string) (secrets.Request, error) {
	r, err := scanSecretRequest(s.pool.QueryRow(ctx, secretRequestSelect+` WHERE ref = $1`, ref))
	if err != nil && !errors.Is(err, core.ErrNotFound) {
		return r, fmt.Errorf("store: get secret request: %w", err)
	}
	return r, err
}

// FulfillSecret runs FulfillSecretRequest in its own operation (the secure
// form's entry point) and returns once it committed.
func (s *Store) FulfillSecret(ctx context.Context, ref string, tokenHash, ciphertext []byte) (secrets.Outcome, secrets.Request, error) {
	var out secrets.Outcome
	var req secrets.Request
	err := s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		o, r, entries, err := tx.FulfillSecretRequest(ctx, ref, tokenHash, ciphertext)
		out, req = o, r
		return entries, err
	})
	if err != nil {
		return 0, secrets.Request{}, err
	}
	return out, req, nil
}

// DeleteSecret runs Tx.DeleteSecret in its own operation.
func (s *Store) DeleteSecret(ctx context.Context, name string, actor core.IdentityID, conv core.ConversationID) (bool, error) {
	var ok bool
	err := s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		deleted, entries, err := tx.DeleteSecret(ctx, name, actor, conv)
		ok = deleted
		return entries, err
	})
	return ok, err
}

// SecretCiphertext returns the sealed value of name and records the use
// (last_used_at). core.ErrNotFound if there is no such secret.
func (s *Store) SecretCiphertext(ctx context.Context, name string) ([]byte, error) {
	var ct []byte
	err := s.pool.QueryRow(ctx, `UPDATE secrets SET last_used_at = $2 WHERE name = $1 RETURNING ciphertext`, name, s.now()).Scan(&ct)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, core.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: secret %s: %w", name, err)
	}
	return ct, nil
}

// ListSecrets lists stored secrets by name: names and times, never values.
func (s *Store) ListSecrets(ctx context.Context) ([]secrets.Info, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, created_at, updated_at, last_used_at FROM secrets ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("store: list secrets: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (secrets.Info, error) {
		var i secrets.Info
		var used *time.Time
		err := row.Scan(&i.Name, &i.CreatedAt, &i.UpdatedAt, &used)
		if used != nil {
			i.LastUsedAt = *used
		}
		return i, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: list secrets: %w", err)
	}
	return out, nil
}
