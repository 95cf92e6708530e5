package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// A conversation's transcript is read from what the core stores anyway:
// the user's turns (their text as stored, credentials redacted at intake)
// and the outbox, where every bot message is a "send" job and every edit of
// it an "update" job under the same message key. A message's position is
// its first job; its content is its newest job, delivered or not: once a
// job is committed it is part of the transcript, which is what lets a
// channel without a copy of its own (the web chat) count an edit as
// delivered when nobody is looking. A tap's "answer" job that carries the
// tapped card is an edit of it; one without a card is no message. Jobs
// that failed for good (a card the channel refused) are left out.

// transcriptBotSQL reads the newest $3 bot messages of conversation $2 on
// channel $1 (anchored at their first job) with their newest content.
const transcriptBotSQL = `WITH anchors AS (
		SELECT o.id, o.message_key, o.created_at FROM outbox o
		WHERE o.conversation = $2 AND o.channel = $1 AND o.status <> 'failed' AND ` + isMessage + `
			AND NOT EXISTS (SELECT 1 FROM outbox p WHERE p.channel = o.channel AND p.message_key = o.message_key
				AND p.id < o.id AND p.status <> 'failed')
		ORDER BY o.id DESC LIMIT $3)
	SELECT a.id, a.message_key, a.created_at, l.id, l.payload, l.secret_output FROM anchors a
	CROSS JOIN LATERAL (SELECT id, payload, secret_output FROM outbox l WHERE l.channel = $1 AND l.message_key = a.message_key
		AND l.conversation = $2 AND l.status <> 'failed' AND ` + isMessageL + ` ORDER BY l.id DESC LIMIT 1) l
	ORDER BY a.id`

// isMessage keeps outbox rows that are a message or an edit of one: a
// tap's answer without a card is neither.
const (
	isMessage  = `(o.op <> 'answer' OR o.payload->'card' IS NOT NULL)`
	isMessageL = `(l.op <> 'answer' OR l.payload->'card' IS NOT NULL)`
)

// transcriptUserSQL reads the newest $3 user messages (turns with text;
// taps are not messages) of conversation $2 on channel $1.
const transcriptUserSQL = `SELECT seq, event_id, sender, body->>'text', received_at FROM turns
	WHERE conversation = $2 AND channel = $1 AND COALESCE(body->>'text', '') <> '' AND body->'tap' IS NULL
	ORDER BY seq DESC LIMIT $3`

// Transcript returns the newest n messages of a conversation, user's and
// bot's together, oldest first: ordered by when each was first stored, a
// user's message before a bot message stored at the same instant (an
// inline reply commits with its turn), then by sequence.
func (s *Store) Transcript(ctx context.Context, ch core.ChannelName, conv core.ConversationID, n int) ([]core.TranscriptEntry, error) {
	if n <= 0 {
		return nil, nil
	}
	out := make([]core.TranscriptEntry, 0, 2*n)
	rows, err := s.pool.Query(ctx, transcriptBotSQL, ch, conv, n)
	if err != nil {
		return nil, fmt.Errorf("store: transcript: %w", err)
	}
	for rows.Next() {
		e, err := scanBotEntry(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: transcript: %w", err)
	}
	rows, err = s.pool.Query(ctx, transcriptUserSQL, ch, conv, n)
	if err != nil {
		return nil, fmt.Errorf("store: transcript: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		e := core.TranscriptEntry{FromUser: true}
		if err := rows.Scan(&e.Seq, &e.EventID, &e.Sender, &e.Text, &e.At); err != nil {
			return nil, fmt.Errorf("store: transcript: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: transcript: %w", err)
	}
	slices.SortFunc(out, func(a, b core.TranscriptEntry) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		if a.FromUser != b.FromUser {
			if a.FromUser {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Seq+a.OutboxID, b.Seq+b.OutboxID)
	})
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out, nil
}

// TranscriptCard returns the message that carries card id in a
// conversation, in its newest state. The engine enqueues a card's message
// under the card's id as message key. ErrNotFound: no such card there.
func (s *Store) TranscriptCard(ctx context.Context, ch core.ChannelName, conv core.ConversationID, id cards.ID) (core.TranscriptEntry, error) {
	row := s.pool.QueryRow(ctx, `SELECT f.id, f.message_key, f.created_at, l.id, l.payload, l.secret_output
		FROM (SELECT id, message_key, created_at FROM outbox o WHERE channel = $1 AND message_key = $3 AND conversation = $2
			AND status <> 'failed' AND `+isMessage+` ORDER BY id LIMIT 1) f
		CROSS JOIN LATERAL (SELECT id, payload, secret_output FROM outbox l WHERE l.channel = $1 AND l.message_key = $3
			AND l.conversation = $2 AND l.status <> 'failed' AND `+isMessageL+` ORDER BY l.id DESC LIMIT 1) l`, ch, conv, string(id))
	e, err := scanBotEntry(row)
	if err != nil {
		return e, err
	}
	if e.Card == nil || e.Card.ID != id {
		return core.TranscriptEntry{}, core.ErrNotFound
	}
	return e, nil
}

func scanBotEntry(row interface{ Scan(...any) error }) (core.TranscriptEntry, error) {
	var e core.TranscriptEntry
	var payload []byte
	var at time.Time
	if err := row.Scan(&e.OutboxID, &e.MessageKey, &at, &e.Version, &payload, &e.SecretOutput); err != nil {
		if err = notFound(err); errors.Is(err, core.ErrNotFound) {
			return e, err
		}
		return e, fmt.Errorf("store: transcript: %w", err)
	}
	var m core.OutMessage
	if err := json.Unmarshal(payload, &m); err != nil {
		return e, fmt.Errorf("store: transcript: decode outbox job %d: %w", e.Version, err)
	}
	e.Text, e.Card, e.At = m.Text, m.Card, at
	return e, nil
}
