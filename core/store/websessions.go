package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/core"
)

// Web chat logins and sessions (adapters/webchat, docs/webchat-protocol.md
// §2). Only SHA-256 hashes of the login secrets and session tokens are
// stored. Every method takes the caller's clock reading (now), so the
// adapter's injected clock decides expiry, as it does for everything else
// it times.

// AddWebLogin stores a one-time login secret's hash, usable until expires.
func (s *Store) AddWebLogin(ctx context.Context, ch core.ChannelName, secretHash [32]byte, expires time.Time) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO webchat_logins (secret_hash, channel, expires_at) VALUES ($1, $2, $3)`,
		secretHash[:], ch, expires)
	if err != nil {
		return fmt.Errorf("store: add web chat login: %w", err)
	}
	return nil
}

// UseWebLogin exchanges a login secret for a session in one statement: the
// secret's row is deleted (so it is used once, whichever instance sees it)
// and the session inserted, or neither. false means the secret is unknown,
// used or expired. Rows of this channel past their expiry are deleted on
// the way, so the tables stay the size of what is live.
func (s *Store) UseWebLogin(ctx context.Context, ch core.ChannelName, secretHash, tokenHash [32]byte, now, expires time.Time) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `
		WITH used AS (
			DELETE FROM webchat_logins WHERE secret_hash = $1 AND channel = $2 RETURNING expires_at
		), session AS (
			INSERT INTO webchat_sessions (token_hash, channel, created_at, expires_at)
			SELECT $3, $2, $4, $5 FROM used WHERE used.expires_at > $4
			RETURNING 1
		), gone_logins AS (
			DELETE FROM webchat_logins WHERE channel = $2 AND expires_at <= $4
		), gone_sessions AS (
			DELETE FROM webchat_sessions WHERE channel = $2 AND expires_at <= $4
		)
		SELECT EXISTS (SELECT 1 FROM session)`, secretHash[:], ch, tokenHash[:], now, expires).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("store: use web chat login: %w", err)
	}
	return ok, nil
}

// WebSession returns when the session with this token hash ends and
// whether it is valid at now (not revoked, not expired). One primary-key
// read: the web chat checks it on every request and frame
// (BenchmarkWebSession).
func (s *Store) WebSession(ctx context.Context, ch core.ChannelName, tokenHash [32]byte, now time.Time) (time.Time, bool, error) {
	var exp time.Time
	err := s.pool.QueryRow(ctx, `SELECT expires_at FROM webchat_sessions
		WHERE token_hash = $1 AND channel = $2 AND revoked_at IS NULL AND expires_at > $3`, tokenHash[:], ch, now).Scan(&exp)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("store: read web chat session: %w", err)
	}
	return exp, true, nil
}

// LiveWebSessions returns which of the given sessions are valid at now:
// the web chat asks for the sessions of its open sockets, to close those
// another instance revoked.
func (s *Store) LiveWebSessions(ctx context.Context, ch core.ChannelName, tokenHashes [][32]byte, now time.Time) (map[[32]byte]bool, error) {
	live := make(map[[32]byte]bool, len(tokenHashes))
	if len(tokenHashes) == 0 {
		return live, nil
	}
	hs := make([][]byte, len(tokenHashes))
	for i := range tokenHashes {
		hs[i] = tokenHashes[i][:]
	}
	rows, err := s.pool.Query(ctx, `SELECT token_hash FROM webchat_sessions
		WHERE token_hash = ANY($1) AND channel = $2 AND revoked_at IS NULL AND expires_at > $3`, hs, ch, now)
	if err != nil {
		return nil, fmt.Errorf("store: read web chat sessions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, fmt.Errorf("store: read web chat sessions: %w", err)
		}
		live[[32]byte(b)] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: read web chat sessions: %w", err)
	}
	return live, nil
}

// EndWebSession revokes one session (a logout).
func (s *Store) EndWebSession(ctx context.Context, ch core.ChannelName, tokenHash [32]byte) error {
	_, err := s.pool.Exec(ctx, `UPDATE webchat_sessions SET revoked_at = now()
		WHERE token_hash = $1 AND channel = $2 AND revoked_at IS NULL`, tokenHash[:], ch)
	if err != nil {
		return fmt.Errorf("store: end web chat session: %w", err)
	}
	return nil
}

// RevokeWebSessions revokes every session of the channel and returns how
// many were live.
func (s *Store) RevokeWebSessions(ctx context.Context, ch core.ChannelName) (int, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE webchat_sessions SET revoked_at = now()
		WHERE channel = $1 AND revoked_at IS NULL`, ch)
	if err != nil {
		return 0, fmt.Errorf("store: revoke web chat sessions: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
