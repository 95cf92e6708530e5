package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

// MCP callers (core/callgate, docs/mcp.md): bearer tokens, stored as
// their sha256 only, and the questions callers put to the owner. No
// method here takes or returns a token itself.

// ErrExists is returned when a named row exists already.
var ErrExists = errors.New("already exists")

// AddMCPToken stores a new token's hash under name, audited
// (mcp.token_added, by name). ErrExists if the name was ever used: a
// revoked name stays, so an identity "mcp:<name>" in the log means one
// token.
func (s *Store) AddMCPToken(ctx context.Context, name string, hash []byte, actor core.IdentityID) error {
	return s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		_, err := tx.exec(ctx, `INSERT INTO mcp_tokens (name, hash, created_at) VALUES ($1, $2, $3)`, name, hash, tx.now())
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			return nil, fmt.Errorf("store: mcp token %s: %w", name, ErrExists)
		}
		if err != nil {
			return nil, fmt.Errorf("store: add mcp token %s: %w", name, err)
		}
		return []audit.Entry{{Kind: audit.KindMCPTokenAdded, Actor: string(actor), Data: map[string]any{"name": name}}}, nil
	})
}

// RevokeMCPToken revokes name's token, audited (mcp.token_revoked);
// false when there is no such unrevoked token.
func (s *Store) RevokeMCPToken(ctx context.Context, name string, actor core.IdentityID) (bool, error) {
	var ok bool
	err := s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		tag, err := tx.exec(ctx, `UPDATE mcp_tokens SET revoked_at = $2 WHERE name = $1 AND revoked_at IS NULL`, name, tx.now())
		if err != nil {
			return nil, fmt.Errorf("store: revoke mcp token %s: %w", name, err)
		}
		if ok = tag.RowsAffected() == 1; !ok {
			return nil, nil
		}
		return []audit.Entry{{Kind: audit.KindMCPTokenRevoked, Actor: string(actor), Data: map[string]any{"name": name}}}, nil
	})
	return ok, err
}

// ListMCPTokens lists the tokens by name: names and times only.
func (s *Store) ListMCPTokens(ctx context.Context) ([]core.MCPToken, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, created_at, revoked_at, last_used_at FROM mcp_tokens ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("store: list mcp tokens: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (core.MCPToken, error) {
		var t core.MCPToken
		var revoked, used *time.Time
		err := r.Scan(&t.Name, &t.CreatedAt, &revoked, &used)
		if revoked != nil {
			t.RevokedAt = *revoked
		}
		if used != nil {
			t.LastUsedAt = *used
		}
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: list mcp tokens: %w", err)
	}
	return out, nil
}

// MCPTokenName returns the name of the unrevoked token with this hash and
// records its use; core.ErrNotFound when there is none (unknown or
// revoked).
func (s *Store) MCPTokenName(ctx context.Context, hash []byte) (string, error) {
	var name string
	err := s.pool.QueryRow(ctx, `UPDATE mcp_tokens SET last_used_at = $2 WHERE hash = $1 AND revoked_at IS NULL RETURNING name`,
		hash, s.now()).Scan(&name)
	if err != nil {
		return "", fmt.Errorf("store: mcp token: %w", notFound(err))
	}
	return name, nil
}

// OwnerConversation is the newest direct conversation any of owners had
// with Silas, on any channel: where a caller's card goes. core.ErrNotFound
// when none of them ever wrote to Silas directly.
func (s *Store) OwnerConversation(ctx context.Context, owners []core.IdentityID) (core.DirectConversation, error) {
	ids := make([]string, len(owners))
	for i, o := range owners {
		ids[i] = string(o)
	}
	var d core.DirectConversation
	err := s.pool.QueryRow(ctx, `SELECT channel, sender, conversation FROM turns
		WHERE sender = ANY($1) AND COALESCE(body->>'chat_kind', '') <> 'group' ORDER BY seq DESC LIMIT 1`, ids).
		Scan(&d.Channel, &d.Identity, &d.Conversation)
	if err != nil {
		return core.DirectConversation{}, fmt.Errorf("store: owner conversation: %w", notFound(err))
	}
	return d, nil
}

type questionBody struct {
	Text    string                `json:"text"`
	Details string                `json:"details,omitempty"`
	Choices []core.QuestionChoice `json:"choices"`
}

const questionSelect = `SELECT id, kind, caller, channel, conversation, body, status, COALESCE(choice, ''), COALESCE(decided_by, ''),
	created_at, expires_at, decided_at FROM mcp_questions`

func scanQuestion(row pgx.Row) (core.Question, error) {
	var q core.Question
	var body []byte
	var decided *time.Time
	err := row.Scan(&q.ID, &q.Kind, &q.Caller, &q.Channel, &q.Conversation, &body, &q.Status, &q.Choice, &q.DecidedBy,
		&q.CreatedAt, &q.ExpiresAt, &decided)
	if err != nil {
		return core.Question{}, notFound(err)
	}
	var b questionBody
	if err := json.Unmarshal(body, &b); err != nil {
		return core.Question{}, fmt.Errorf("store: question %s: %w", q.ID, err)
	}
	q.Text, q.Details, q.Choices = b.Text, b.Details, b.Choices
	if decided != nil {
		q.DecidedAt = *decided
	}
	return q, nil
}

// QueueQuestion stores a new pending question.
func (t *Tx) QueueQuestion(q core.Question) error {
	body, err := json.Marshal(questionBody{Text: q.Text, Details: q.Details, Choices: q.Choices})
	if err != nil {
		return fmt.Errorf("store: question %s: %w", q.ID, err)
	}
	t.later("insert question", `INSERT INTO mcp_questions (id, kind, caller, channel, conversation, body, created_at, expires_at)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8)`, q.ID, q.Kind, q.Caller, q.Channel, q.Conversation, body, q.CreatedAt, q.ExpiresAt)
	return nil
}

// GetQuestion reads a question inside the transaction, locking its row.
func (t *Tx) GetQuestion(ctx context.Context, id string) (core.Question, error) {
	return scanQuestion(t.queryRow(ctx, questionSelect+" WHERE id = $1 FOR UPDATE", id))
}

// GetQuestion reads a question.
func (s *Store) GetQuestion(ctx context.Context, id string) (core.Question, error) {
	return scanQuestion(s.pool.QueryRow(ctx, questionSelect+" WHERE id = $1", id))
}

// SettleQuestion moves a pending question to status (answered with
// choice by by, or expired); false when it was no longer pending.
func (t *Tx) SettleQuestion(ctx context.Context, id string, status core.QuestionStatus, choice string, by core.IdentityID) (bool, error) {
	tag, err := t.exec(ctx, `UPDATE mcp_questions SET status = $2, choice = NULLIF($3, ''), decided_by = NULLIF($4, ''), decided_at = $5
		WHERE id = $1 AND status = 'pending'`, id, status, choice, by, t.now())
	if err != nil {
		return false, fmt.Errorf("store: settle question %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// OpenCalls counts what caller still waits on: its open approval requests
// and pending questions.
func (s *Store) OpenCalls(ctx context.Context, caller core.IdentityID) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM approvals WHERE requester = $1 AND status IN ('pending', 'confirming'))
		+ (SELECT count(*) FROM mcp_questions WHERE caller = $1 AND status = 'pending')`, string(caller)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: open calls of %s: %w", caller, err)
	}
	return n, nil
}
