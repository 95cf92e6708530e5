package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/core"
)

// QueueMessage adds an outbound delivery.
func (t *Tx) QueueMessage(ch core.ChannelName, op core.OutboxOp, key string, m core.OutMessage) error {
	return t.QueueMessageThen(ch, op, key, m, nil)
}

// QueueMessageThen is QueueMessage that hands the job's id to then once the batch's
// statements were sent (nil: not needed).
func (t *Tx) QueueMessageThen(ch core.ChannelName, op core.OutboxOp, key string, m core.OutMessage, then func(id int64)) error {
	payload, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("store: marshal outbound message: %w", err)
	}
	t.enqueues = append(t.enqueues, queuedJob{ch: ch, conv: m.Conversation, op: op, key: key, payload: string(jsonbSafe(payload)),
		secret: m.SecretOutput, then: then})
	return nil
}

// QueueMessageHanded is QueueMessage that hands the job to then, as the
// conversation's lane needs it to deliver it without reading it back
// (Queued, core/outbox HandOff), once the batch's statements were sent.
func (t *Tx) QueueMessageHanded(ch core.ChannelName, op core.OutboxOp, key string, m core.OutMessage, then func(Queued)) error {
	q := Queued{OutboxJob: core.OutboxJob{Channel: ch, Conversation: m.Conversation, Op: op, MessageKey: key, Message: m}, gen: refGen(ch, key)}
	q.Message.CardText = "" // not stored: the lane sets it
	if err := t.QueueMessage(ch, op, key, m); err != nil {
		return err
	}
	j := &t.enqueues[len(t.enqueues)-1]
	if err := q.asStored(j.payload); err != nil {
		return err
	}
	j.handed = q.handTo(then)
	return nil
}

// QueueTapAnswer enqueues the one answer to a tap (core.OpAnswer), under
// key: the tapped card's id when a carries the card's new state (the
// transcript then reads it as the card's edit, and the lane finds the
// card's message through it), else a key of its own.
func (t *Tx) QueueTapAnswer(ch core.ChannelName, key string, a core.TapAnswer) error {
	return t.QueueTapAnswerHanded(ch, key, a, nil)
}

// QueueTapAnswerHanded is QueueTapAnswer that hands the job to then (nil:
// not needed), as QueueMessageHanded does.
func (t *Tx) QueueTapAnswerHanded(ch core.ChannelName, key string, a core.TapAnswer, then func(Queued)) error {
	a.Ref, a.CardText = "", "" // not stored: the lane sets them
	m := core.OutMessage{Conversation: a.Conversation, Card: a.Card}
	p := answerPayload{OutMessage: m}
	// As NextOutboxJob returns it: the answer's card is the message's.
	q := Queued{OutboxJob: core.OutboxJob{Channel: ch, Conversation: a.Conversation, Op: core.OpAnswer, MessageKey: key, Message: m, Answer: &a},
		gen: refGen(ch, key)}
	stored := a
	stored.Card = nil // stored once, as the message's card
	p.Answer = &stored
	payload, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("store: marshal tap answer: %w", err)
	}
	body := string(jsonbSafe(payload))
	if then != nil {
		if err := q.asStored(body); err != nil {
			return err
		}
	}
	t.enqueues = append(t.enqueues, queuedJob{ch: ch, conv: a.Conversation, op: core.OpAnswer, key: key, payload: body,
		handed: q.handTo(then)})
	return nil
}

// asStored makes q's message (and answer) what NextOutboxJob decodes from
// payload, the job's stored form, where the two may differ: text that was
// not valid UTF-8, or held NUL, is stored with U+FFFD in its place
// (encoding/json, jsonbSafe — both write it as this escape, which a valid
// character never is). Decoding every payload would cost the lane's read
// saved a good part of its CPU again.
func (q *Queued) asStored(payload string) error {
	if !strings.Contains(payload, `\ufffd`) {
		return nil
	}
	secret := q.Message.SecretOutput // stored beside the payload
	if err := decodeJob(&q.OutboxJob, []byte(payload)); err != nil {
		return err
	}
	q.Message.SecretOutput = secret
	return nil
}

// Queued is an outbox job as the transaction that queued it knows it once
// its insert ran: what the conversation's lane needs to deliver it without
// reading it back (core/outbox HandOff; issue 26: a read per card edit was
// a round trip of every execution, twice). For an edit (an update, a tap's
// answer) Ref is the platform ref of the message it edits, read in the
// insert's round trip (sent_messages, "" if none; queueJobs) — what
// NextOutboxJob would return, while RefCurrent holds. Whether a newer edit supersedes it is for the
// lane to say: the newer edit's transaction may commit after this one.
type Queued struct {
	core.OutboxJob
	Ref core.MessageRef
	// gen is refGen of the job's message when the job was queued, before
	// its insert was sent.
	gen uint64
}

// handTo returns the insert's callback that completes q and hands it to
// then (nil for a nil then).
func (q Queued) handTo(then func(Queued)) func(id int64, ref core.MessageRef, now time.Time) {
	if then == nil {
		return nil
	}
	return func(id int64, ref core.MessageRef, now time.Time) {
		q.ID, q.Ref, q.NextAt, q.CreatedAt = id, ref, now, now
		then(q)
	}
}

// RefCurrent reports whether q.Ref is still the platform ref NextOutboxJob
// would read for q's message: no transaction that may have recorded
// another (a delivery of a card as a new message, Tx.QueueDelivered)
// ended in this process since q was queued (RefRecorded), and no
// heartbeat of this process saw another instance meanwhile (another
// instance's deliveries are not counted here). A ref recorded by a
// transaction that committed before q.Ref was read is in it; one that
// committed later was counted after q was queued (the count is taken
// before the read is sent). False: read the job back.
func (q Queued) RefCurrent() bool { return refGen(q.Channel, q.MessageKey) == q.gen }

// refGens count, by a hash of (channel, message key), the transactions
// that may have recorded a platform ref (RefRecorded); othersSeen counts
// the heartbeats that saw another instance. Process-wide, not per Store:
// a Tx does not know its Store, and a count from another Store of the
// same process (tests) only costs a lane a read.
var (
	refGens    [1024]atomic.Uint64
	othersSeen atomic.Uint64
)

func refBucket(ch core.ChannelName, key string) *atomic.Uint64 {
	// FNV-1a of channel, a zero byte, key (hash/fnv's, without its
	// allocation).
	h := uint32(2166136261)
	for i := 0; i < len(ch); i++ {
		h = (h ^ uint32(ch[i])) * 16777619
	}
	h *= 16777619
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return &refGens[h%uint32(len(refGens))]
}

// refGen is the generation a Queued's RefCurrent compares: both counts
// only grow, so their sum changes whenever either does.
func refGen(ch core.ChannelName, key string) uint64 {
	return refBucket(ch, key).Load() + othersSeen.Load()
}

// RefRecorded is told, once a transaction that marked job j delivered
// with ref ended (committed or not: a commit whose answer was lost may
// have applied), that it may have recorded a new platform ref for j's
// message (as QueueDelivered does: a card's ref). Handed jobs queued
// before then are read back (RefCurrent).
func RefRecorded(j core.OutboxJob, ref core.MessageRef) {
	if ref != "" && j.Message.Card != nil {
		refBucket(j.Channel, j.MessageKey).Add(1)
	}
}

// answerPayload is an outbox job's payload: the message, and for an
// OpAnswer job the tap's answer (whose card is the message's).
type answerPayload struct {
	core.OutMessage
	Answer *core.TapAnswer `json:"tap_answer,omitempty"`
}

// queueJobs adds one INSERT for all queued outbox jobs, in queue order (ids
// ascend in that order, which is the delivery order), and returns the
// labels of the statements it queued. When a job edits a card, the same
// statement fans the edit out to the card's other routed messages
// (routes.go), and t records their conversations. Each edit to be handed
// over (Queued) gets a read of its message's platform ref — the scalar
// subquery NextOutboxJob runs — in the same statement, up to
// handedRefsMax of them (handedRefsSQL); more go as statements of their
// own before it, in the same round trip.
func (t *Tx) queueJobs(b *pgx.Batch, jobs []queuedJob, now time.Time) (labels []string) {
	n := len(jobs)
	chans, convs, ops, keys, payloads := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	secret := make([]bool, n)
	edits := false
	var handed []int // the jobs whose message's ref is read
	for i, j := range jobs {
		chans[i], convs[i], ops[i], keys[i], payloads[i], secret[i] = string(j.ch), string(j.conv), string(j.op), j.key, j.payload, j.secret
		edit := j.op == core.OpUpdate || j.op == core.OpAnswer
		edits = edits || edit
		if edit && j.handed != nil {
			handed = append(handed, i)
		}
	}
	var refs []core.MessageRef
	if len(handed) > 0 {
		refs = make([]core.MessageRef, n)
	}
	args := []any{chans, convs, ops, keys, payloads, now, secret}
	var reads string
	if len(handed) > handedRefsMax {
		for _, i := range handed {
			b.Queue(`SELECT ref FROM sent_messages WHERE channel = $1 AND message_key = $2`, chans[i], keys[i]).QueryRow(func(row pgx.Row) error {
				err := row.Scan(&refs[i])
				if errors.Is(err, pgx.ErrNoRows) {
					return nil // never delivered (or not as a card)
				}
				return err
			})
			labels = append(labels, "read sent message ref")
		}
	} else {
		for k, i := range handed {
			reads += fmt.Sprintf(handedRefsSQL, k, len(args)+1, len(args)+2)
			args = append(args, chans[i], keys[i])
		}
	}
	insert := `INSERT INTO outbox (channel, conversation, op, message_key, payload, secret_output, created_at, next_at)
		SELECT channel, conversation, op, message_key, payload, secret_output, $6, $6
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $7::boolean[]) WITH ORDINALITY AS u(channel, conversation, op, message_key, payload, secret_output, n)` +
		inOrder(n, "n")
	sql := insert + ` RETURNING id, NULL::text, NULL::int, NULL::text`
	if edits {
		// Sends (the hot path) never edit a card: only edits pay for the
		// fan-out's join.
		sql = `WITH ins AS (` + insert + ` RETURNING id, channel, conversation, op, message_key, payload, secret_output)` + fanOutSQL(n) +
			` SELECT id, NULL::text, NULL::int, NULL::text FROM ins UNION ALL SELECT NULL::bigint, conversation, NULL::int, NULL::text FROM fan` + reads
	}
	b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		ids := make([]int64, 0, n)
		for rows.Next() {
			var id *int64
			var fanned, ref *string
			var k *int32
			if err := rows.Scan(&id, &fanned, &k, &ref); err != nil {
				return err
			}
			switch {
			case id != nil:
				ids = append(ids, *id)
			case k != nil:
				if *k < 0 || int(*k) >= len(handed) {
					return fmt.Errorf("a ref read for handed edit %d of %d", *k, len(handed))
				}
				if ref != nil {
					refs[handed[*k]] = core.MessageRef(*ref)
				}
			case fanned != nil && !slices.Contains(t.fanned, core.ConversationID(*fanned)):
				t.fanned = append(t.fanned, core.ConversationID(*fanned))
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(ids) != n {
			return fmt.Errorf("%d rows inserted for %d jobs", len(ids), n)
		}
		// One statement draws its ids in row order: ascending ids are the
		// jobs in queue order.
		slices.Sort(ids)
		for i, j := range jobs {
			if j.then != nil {
				j.then(ids[i])
			}
			if j.handed != nil {
				var ref core.MessageRef
				if refs != nil {
					ref = refs[i]
				}
				j.handed(ids[i], ref, now)
			}
		}
		return nil
	})
	return append(labels, "enqueue")
}

// handedRefsSQL is one handed edit's ref read (its index in the statement's
// handed edits, its message's channel and key parameters) as a branch of
// the outbox INSERT's result: a row (NULL, NULL, index, the ref or NULL
// when none was recorded). It is the primary-key lookup NextOutboxJob's
// subquery makes, and it was a statement of its own in the same round trip
// (two per execution in silas-load's phase (c)). As a branch with its own
// parameters it is an InitPlan run once, costed alike in the generic plan
// and in a custom one, so the statement keeps its generic plan — unlike a
// subquery per row of the INSERT's result, whose generic cost grows with
// the generic estimate of the unnest (10 rows, against the array's length
// in a custom plan): that form was planned on every run and cost
// PostgreSQL 0.5–0.8 ms per execution (BENCHMARKS.md "Issue 26 — plans";
// TestTapPathKeepsGenericPlans). It reads with the INSERT's snapshot, taken
// in the same round trip as the separate read's, after the caller took
// its ref generation (Queued).
const handedRefsSQL = `
	UNION ALL SELECT NULL::bigint, NULL::text, %d, (SELECT ref FROM sent_messages WHERE channel = $%d AND message_key = $%d)`

// handedRefsMax: up to this many handed edits' ref reads go in the outbox
// INSERT (a statement text per count); a batch with more (a group commit
// of several executions' card edits) reads them apart, as statements of
// their own in the same round trip, instead of preparing ever more texts.
const handedRefsMax = 4

// NextOutboxJob returns a conversation's oldest pending job, whether a newer
// pending edit of the same message supersedes it, and the platform ref of
// the message it edits (empty if none was recorded). The ref is a scalar
// subquery on sent_messages' primary key, run for the one row returned —
// not a LEFT JOIN, which the planner made a hash join over a seq scan of
// every sent message while the table was small (each call of an
// execution's three, in silas-load), and which is more plan to set up on
// every call either way. ErrNotFound: nothing
// pending. Jobs in skip are passed over: the caller delivered them and
// their record has not committed yet (core/outbox's lazy marks).
func (s *Store) NextOutboxJob(ctx context.Context, conv core.ConversationID, skip ...int64) (j core.OutboxJob, superseded bool, ref core.MessageRef, err error) {
	var op string
	var payload []byte
	var r *string
	args := []any{conv}
	where := `o.conversation = $1 AND o.status = 'pending'`
	if len(skip) > 0 {
		args = append(args, skip)
		where += ` AND o.id <> ALL($2::bigint[])`
	}
	err = s.pool.QueryRow(ctx, `SELECT o.id, o.channel, o.conversation, o.op, o.message_key, o.payload, o.attempts, o.next_at, o.created_at,
			o.op = 'update' AND EXISTS (SELECT 1 FROM outbox l WHERE l.status = 'pending' AND l.channel = o.channel
				AND l.message_key = o.message_key AND l.op = 'update' AND l.id > o.id),
			(SELECT s.ref FROM sent_messages s WHERE s.channel = o.channel AND s.message_key = o.message_key)
		FROM outbox o
		WHERE `+where+` ORDER BY o.id LIMIT 1`, args...).
		Scan(&j.ID, &j.Channel, &j.Conversation, &op, &j.MessageKey, &payload, &j.Attempts, &j.NextAt, &j.CreatedAt, &superseded, &r)
	if err != nil {
		return j, false, "", notFound(err)
	}
	j.Op = core.OutboxOp(op)
	if err := decodeJob(&j, payload); err != nil {
		return j, false, "", err
	}
	if r != nil {
		ref = core.MessageRef(*r)
	}
	return j, superseded, ref, nil
}

// decodeJob sets j's message and answer from its stored payload.
func decodeJob(j *core.OutboxJob, payload []byte) error {
	var p answerPayload
	if err := json.Unmarshal(payload, &p); err != nil {
		return fmt.Errorf("store: decode outbox job %d: %w", j.ID, err)
	}
	j.Message = p.OutMessage
	j.Answer = nil
	if p.Answer != nil {
		a := *p.Answer
		a.Card = j.Message.Card
		j.Answer = &a
	}
	return nil
}

// PendingOutboxConversations lists conversations with pending deliveries
// (for recovery after a restart and for retries).
func (s *Store) PendingOutboxConversations(ctx context.Context, limit int) ([]core.ConversationID, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT conversation FROM outbox WHERE status = 'pending' LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("store: pending outbox conversations: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[core.ConversationID])
	if err != nil {
		return nil, fmt.Errorf("store: pending outbox conversations: %w", err)
	}
	return out, nil
}

// PendingOutboxConversationsOf is PendingOutboxConversations for the jobs
// of one channel.
func (s *Store) PendingOutboxConversationsOf(ctx context.Context, ch core.ChannelName, limit int) ([]core.ConversationID, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT conversation FROM outbox WHERE status = 'pending' AND channel = $1 LIMIT $2`, ch, limit)
	if err != nil {
		return nil, fmt.Errorf("store: pending outbox conversations of %s: %w", ch, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[core.ConversationID])
	if err != nil {
		return nil, fmt.Errorf("store: pending outbox conversations of %s: %w", ch, err)
	}
	return out, nil
}

// QueueDelivered marks a job delivered (or superseded) and remembers the
// platform ref.
func (t *Tx) QueueDelivered(j core.OutboxJob, ref core.MessageRef, status core.OutboxStatus) {
	t.delivered = append(t.delivered, queuedDelivered{id: j.ID, status: status})
	// Only cards are edited later, so only their platform refs are kept.
	if ref != "" && j.Message.Card != nil {
		t.later("remember sent message", `INSERT INTO sent_messages (channel, message_key, conversation, ref, sent_at) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (channel, message_key) DO UPDATE SET ref = EXCLUDED.ref`, j.Channel, j.MessageKey, j.Conversation, ref, t.now())
	}
}

// OutboxRetry records a failed attempt and when to try again.
func (t *Tx) OutboxRetry(ctx context.Context, id int64, next time.Time, errText string) error {
	_, err := t.exec(ctx, `UPDATE outbox SET attempts = attempts + 1, next_at = $2, last_error = $3 WHERE id = $1 AND status = 'pending'`, id, next, errText)
	if err != nil {
		return fmt.Errorf("store: outbox retry: %w", err)
	}
	return nil
}

// OutboxFailed gives up on a job.
func (t *Tx) OutboxFailed(ctx context.Context, id int64, errText string) error {
	_, err := t.exec(ctx, `UPDATE outbox SET status = 'failed', attempts = attempts + 1, last_error = $2 WHERE id = $1 AND status = 'pending'`, id, errText)
	if err != nil {
		return fmt.Errorf("store: outbox failed: %w", err)
	}
	return nil
}
