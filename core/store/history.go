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
//
// A job is an anchor when it is its message's first job that did not fail:
// its id is the smallest of those under its key. That is written as a
// scalar subquery, looked up per candidate in outbox_message_key (channel,
// message_key, id), and not as NOT EXISTS (an earlier such job): the
// planner may run an anti-join's inner side unparameterised, and did with
// the statistics of a young table (a fresh database, before autovacuum
// analysed it) — every candidate then rescanned all of the channel's jobs,
// ≈ 11,000 rows and 5 ms of PostgreSQL's CPU per LLM message with 700
// jobs in the table, growing with it (BENCHMARKS.md, "Issue 26 — LLM path,
// margin"). message_key is NOT NULL, so both forms keep the same rows.
const transcriptBotSQL = `WITH anchors AS (
		SELECT o.id, o.message_key, o.created_at FROM outbox o
		WHERE o.conversation = $2 AND o.channel = $1 AND o.status <> 'failed' AND ` + isMessage + `
			AND o.id = (SELECT min(p.id) FROM outbox p WHERE p.channel = o.channel AND p.message_key = o.message_key
				AND p.status <> 'failed')
		ORDER BY o.id DESC LIMIT $3)
	SELECT a.id, a.message_key, a.created_at, l.id AS version, ` + botContent + `, l.secret_output FROM anchors a
	CROSS JOIN LATERAL (SELECT id, payload, secret_output FROM outbox l WHERE l.channel = $1 AND l.message_key = a.message_key
		AND l.conversation = $2 AND l.status <> 'failed' AND ` + isMessageL + ` ORDER BY l.id DESC LIMIT 1) l
	ORDER BY a.id`

// botContent is what the transcript needs of a bot message's newest job
// (l): its text and its card, taken out of the payload by PostgreSQL, so
// the rest of it (an answer job's tap, the conversation) is never sent
// nor decoded. Payloads are core.OutMessage as encoding/json writes it
// (exact keys; "card" omitted when there is none), so this reads what
// decoding the whole payload read.
const botContent = `COALESCE(l.payload->>'text', '') AS text, NULLIF(l.payload->'card', 'null'::jsonb) AS card`

// isMessage keeps outbox rows that are a message or an edit of one: a
// tap's answer without a card is neither.
const (
	isMessage  = `(o.op <> 'answer' OR o.payload->'card' IS NOT NULL)`
	isMessageL = `(l.op <> 'answer' OR l.payload->'card' IS NOT NULL)`
)

// transcriptUserSQL reads the newest $3 user messages (turns with text;
// taps are not messages) of conversation $2 on channel $1.
const transcriptUserSQL = `SELECT seq, event_id, sender, body->>'text' AS text, received_at FROM turns
	WHERE conversation = $2 AND channel = $1 AND COALESCE(body->>'text', '') <> '' AND body->'tap' IS NULL
	ORDER BY seq DESC LIMIT $3`

// transcriptSQL reads both in one statement (one round trip for the LLM
// agent's history): a bot row is (rowBot, anchor id, message key, first
// stored at, newest job id, its text, its card, its secret_output mark,
// ”), a user row (rowUser, seq, event id, received at, 0, text, NULL,
// false, sender).
const transcriptSQL = `WITH bot AS (` + transcriptBotSQL + `), usr AS (` + transcriptUserSQL + `)
	SELECT 0::int2, id, message_key, created_at, version, text, card, secret_output, ''::text FROM bot
	UNION ALL
	SELECT 1::int2, seq, event_id, received_at, 0::bigint, text, NULL::jsonb, false, sender FROM usr`

// Transcript returns the newest n messages of a conversation, user's and
// bot's together, oldest first: ordered by when each was first stored, a
// user's message before a bot message stored at the same instant (an
// inline reply commits with its turn), then by sequence.
func (s *Store) Transcript(ctx context.Context, ch core.ChannelName, conv core.ConversationID, n int) ([]core.TranscriptEntry, error) {
	out, _, err := s.transcript(ctx, transcriptSQL, ch, conv, n)
	return out, err
}

// A transcript row's kind, its first column.
const (
	rowBot        = 0
	rowUser       = 1
	rowSecretName = 2
)

// transcriptNamesSQL is transcriptSQL with one more row per stored secret:
// (rowSecretName, its place in ListSecrets' order, its name, …). Names only: a
// secret's value is never read here.
const transcriptNamesSQL = transcriptSQL + `
	UNION ALL
	SELECT 2::int2, row_number() OVER (ORDER BY name), name, now(), 0::bigint, ''::text, NULL::jsonb, false, ''::text FROM secrets`

// TranscriptAndSecretNames is Transcript together with the stored
// secrets' names (never their values), in ListSecrets' order, read in the
// same statement: the LLM agent needs both for every message, and one
// round trip reads them as they are at that moment in the database,
// whichever instance stored them.
func (s *Store) TranscriptAndSecretNames(ctx context.Context, ch core.ChannelName, conv core.ConversationID, n int) ([]core.TranscriptEntry, []string, error) {
	if n <= 0 {
		// No transcript wanted: only the names, as ListSecrets lists them.
		infos, err := s.ListSecrets(ctx)
		if err != nil {
			return nil, nil, err
		}
		names := make([]string, len(infos))
		for i, info := range infos {
			names[i] = info.Name
		}
		return nil, names, nil
	}
	return s.transcript(ctx, transcriptNamesSQL, ch, conv, n)
}

// transcript runs transcriptSQL or transcriptNamesSQL.
func (s *Store) transcript(ctx context.Context, query string, ch core.ChannelName, conv core.ConversationID, n int) ([]core.TranscriptEntry, []string, error) {
	if n <= 0 {
		return nil, nil, nil
	}
	out := make([]core.TranscriptEntry, 0, 2*n)
	names := []string{}
	var namesAt []int64
	rows, err := s.pool.Query(ctx, query, ch, conv, n)
	if err != nil {
		return nil, nil, fmt.Errorf("store: transcript: %w", err)
	}
	defer rows.Close()
	// Scanned into the same variables row after row: each would otherwise
	// be allocated per row.
	var (
		kind   int16
		bot    botRow
		sender core.IdentityID
	)
	for rows.Next() {
		kind, bot, sender = 0, botRow{}, ""
		if err := rows.Scan(&kind, &bot.id, &bot.key, &bot.at, &bot.version, &bot.text, &bot.card, &bot.secretOutput, &sender); err != nil {
			return nil, nil, fmt.Errorf("store: transcript: %w", err)
		}
		switch {
		case kind == rowSecretName:
			names, namesAt = append(names, bot.key), append(namesAt, bot.id)
		case kind == rowUser:
			out = append(out, core.TranscriptEntry{FromUser: true, Seq: bot.id, EventID: bot.key, At: bot.at, Sender: sender, Text: bot.text})
		default:
			e, err := bot.entry()
			if err != nil {
				return nil, nil, err
			}
			out = append(out, e)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("store: transcript: %w", err)
	}
	// A UNION ALL promises no order: the names are put back in ListSecrets'
	// (the database's collation, not byte order).
	if !slices.IsSorted(namesAt) {
		idx := make([]int, len(names))
		for i := range idx {
			idx[i] = i
		}
		slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(namesAt[a], namesAt[b]) })
		sorted := make([]string, len(names))
		for i, j := range idx {
			sorted[i] = names[j]
		}
		names = sorted
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
	return out, names, nil
}

// TranscriptCard returns the message that carries card id in a
// conversation, in its newest state. The engine enqueues a card's message
// under the card's id as message key. ErrNotFound: no such card there.
func (s *Store) TranscriptCard(ctx context.Context, ch core.ChannelName, conv core.ConversationID, id cards.ID) (core.TranscriptEntry, error) {
	row := s.pool.QueryRow(ctx, `SELECT f.id, f.message_key, f.created_at, l.id, `+botContent+`, l.secret_output
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
	var b botRow
	if err := row.Scan(&b.id, &b.key, &b.at, &b.version, &b.text, &b.card, &b.secretOutput); err != nil {
		if err = notFound(err); errors.Is(err, core.ErrNotFound) {
			return core.TranscriptEntry{}, err
		}
		return core.TranscriptEntry{}, fmt.Errorf("store: transcript: %w", err)
	}
	return b.entry()
}

// botRow is a bot message as read: its first job (id, key, when) and its
// newest (version, text, card, mark).
type botRow struct {
	id           int64
	key          string
	at           time.Time
	version      int64
	text         string
	card         []byte // the card's JSON; nil: no card
	secretOutput bool
}

func (b botRow) entry() (core.TranscriptEntry, error) {
	e := core.TranscriptEntry{OutboxID: b.id, MessageKey: b.key, Version: b.version, SecretOutput: b.secretOutput, Text: b.text, At: b.at}
	if b.card != nil {
		if err := json.Unmarshal(b.card, &e.Card); err != nil {
			return e, fmt.Errorf("store: transcript: decode outbox job %d: %w", e.Version, err)
		}
	}
	return e, nil
}
