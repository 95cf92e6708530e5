package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/core"
)

// InsertTurn stores a turn unless (channel, event id) exists. dup reports a
// redelivery; seq is the turn's sequence either way. It is QueueTurn sent
// at once, for callers that need the answer before going on.
func (t *Tx) InsertTurn(ctx context.Context, turn core.Turn) (seq int64, dup bool, err error) {
	if err := t.QueueTurn(turn, core.TurnPending, func(s int64, d bool) { seq, dup = s, d }); err != nil {
		return 0, false, err
	}
	if err := t.flush(ctx); err != nil {
		return 0, false, err
	}
	return seq, dup, nil
}

// InsertInlineTurn is InsertTurn for a turn this transaction also
// processes (a tap answered inline, core/engine): the row is stored done at
// once, and this transaction's QueueFinishTurn(seq, core.TurnDone, "") of
// it writes nothing more. Stored pending and finished a moment later, the
// row was written twice: the finish's UPDATE changes status, which the
// pending partial indexes name, so it cannot be a HOT update — a second
// heap tuple and four more index entries per tap (and both pending indexes
// took, then lost, an entry), for a state no other transaction can ever
// see. The outcomes are the same: the turn commits done with the rest of
// its processing, or not at all (an error rolls the whole transaction
// back, the insert with it). Nothing is lost from the finish's fence
// either: it can only refuse a turn another instance adopted, and no
// instance can adopt a row before it commits. A finish of it as failed
// (no caller does that in the same transaction today) is still written.
//
// A tap's insert carries the read its decision starts with: the tapped
// card's approval request, locked, and its route into the tap's
// conversation (GetApprovalRoute, which answers from it; core/decide
// Tap). The read does not depend on the insert, so the tap costs one
// round trip fewer up to its decision (issue 26). It goes after the
// insert, where the decision's own read was: the locks are taken in the
// same order as before — the turn's key, then the request's row, then
// whatever the decision writes. A card that is not an approval request
// (an access request, a question) reads nothing and locks nothing; its
// GetApprovalRoute answers "not found" from the prefetch just the same.
//
// A duplicate (the tap stored before) decides nothing, but the read was
// sent with the insert and has locked the request's row until this
// transaction ends. That takes no lock a first delivery of the same tap
// does not take, in the same place, so it adds no lock order; and while
// that first delivery's transaction is open, the duplicate's insert
// waits for it anyway (the same key), so the row lock adds no wait to
// that race (after it, the duplicate waits for the row like any tap on
// the card). The read's answer is dropped: nothing else reads it. The
// same holds for a tap the engine then does not decide (its sender is
// not answered in that conversation, core/engine gate).
func (t *Tx) InsertInlineTurn(ctx context.Context, turn core.Turn) (seq int64, dup bool, err error) {
	if err := t.QueueTurn(turn, core.TurnDone, func(s int64, d bool) { seq, dup = s, d }); err != nil {
		return 0, false, err
	}
	var p *approvalRoute
	var extras []extra
	if turn.Tap != nil {
		p = &approvalRoute{id: core.ApprovalID(turn.Tap.Card), conv: turn.Conversation}
		extras = t.approvalRouteExtras(p)
	}
	t.prefetched = nil
	if err := t.send(ctx, extras); err != nil {
		return 0, false, err
	}
	if !dup {
		t.prefetched = p
		if t.inline == nil {
			t.inline = map[int64]bool{}
		}
		t.inline[seq] = true
	}
	return seq, dup, nil
}

// QueueFinishTurn marks a pending turn processed (done or failed). It is
// fenced: a turn another instance adopted (this one was taken for dead: a
// pause past its heartbeat) is not finished, and the whole transaction
// fails with core.ErrFenced, so nothing its processing queued commits.
// A turn this transaction stored with InsertInlineTurn is done already:
// finishing it done writes nothing, and failed rewrites its status.
func (t *Tx) QueueFinishTurn(seq int64, status core.TurnStatus, errText string) {
	if t.inline[seq] {
		if status != core.TurnDone {
			t.later("fail inline turn", `UPDATE turns SET status = $2, error = NULLIF($3, ''), processed_at = $4 WHERE seq = $1`,
				seq, string(status), errText, t.now())
		}
		return
	}
	t.finishes = append(t.finishes, queuedFinish{seq: seq, status: status, err: errText})
}

// QueueTurn stores a turn unless (channel, event id) exists, like
// InsertTurn, but gathered with the other turns of the batch into one
// statement: then receives the seq (and dup for a redelivery) when the
// batch's statements are sent, before any Finally function runs. status is
// TurnPending for a turn still to be processed, or TurnDone for one whose
// outcome commits in the same transaction.
func (t *Tx) QueueTurn(turn core.Turn, status core.TurnStatus, then func(seq int64, dup bool)) error {
	body, err := json.Marshal(turn)
	if err != nil {
		return fmt.Errorf("store: marshal turn: %w", err)
	}
	t.turns = append(t.turns, queuedTurn{turn: storableTurn(turn), body: string(jsonbSafe(body)), status: status, then: then})
	return nil
}

// queueTurns adds one INSERT for all queued turns. Each turn's then gets
// its seq and whether the event was stored before (dup); then is set to nil
// once called, so flush can tell that every turn was answered.
func queueTurns(b *pgx.Batch, turns []queuedTurn, now time.Time, instance *string) {
	n := len(turns)
	chans, evs, convs, senders, bodies, sts := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, q := range turns {
		chans[i], evs[i], convs[i], senders[i], bodies[i], sts[i] = string(q.turn.Channel), q.turn.EventID, string(q.turn.Conversation), string(q.turn.Sender), q.body, string(q.status)
	}
	// Rows that conflict (stored before, or twice in this batch) come back
	// from the second SELECT with their existing seq; ON CONFLICT DO NOTHING
	// skips a key repeated within the statement, so the first op queued
	// with it is the one that stored it.
	b.Queue(`WITH u AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::text[]) WITH ORDINALITY
				AS u(channel, event_id, conversation, sender, body, status, n)),
			ins AS (INSERT INTO turns (channel, event_id, conversation, sender, body, status, received_at, processed_at, instance)
				SELECT channel, event_id, conversation, sender, body, status, $7, CASE WHEN status = 'pending' THEN NULL ELSE $7::timestamptz END, $8
				FROM u`+inOrder(n, "n")+`
				ON CONFLICT (channel, event_id) DO NOTHING RETURNING channel, event_id, seq)
		SELECT channel, event_id, seq FROM ins`, chans, evs, convs, senders, bodies, sts, now, instance).Query(func(rows pgx.Rows) error {
		byKey := make(map[[2]string]int64, n)
		for rows.Next() {
			var ch, ev string
			var seq int64
			if err := rows.Scan(&ch, &ev, &seq); err != nil {
				return err
			}
			byKey[[2]string{ch, ev}] = seq
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for i := range turns {
			k := [2]string{string(turns[i].turn.Channel), turns[i].turn.EventID}
			if seq, ok := byKey[k]; ok {
				delete(byKey, k) // a repeat of the key in this batch is a duplicate
				turns[i].then(seq, false)
				turns[i].then = nil
			}
		}
		return nil
	})
}

// PendingTurns lists turns not yet processed, in arrival order.
func (s *Store) PendingTurns(ctx context.Context) ([]core.StoredTurn, error) {
	rows, err := s.pool.Query(ctx, `SELECT seq, body FROM turns WHERE status = 'pending' ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("store: pending turns: %w", err)
	}
	return collectTurns(rows)
}

// collectTurns reads (seq, body) rows as stored turns.
func collectTurns(rows pgx.Rows) ([]core.StoredTurn, error) {
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (core.StoredTurn, error) {
		var st core.StoredTurn
		var body []byte
		if err := row.Scan(&st.Seq, &body); err != nil {
			return st, err
		}
		if err := json.Unmarshal(body, &st.Turn); err != nil {
			return st, fmt.Errorf("decode turn %d: %w", st.Seq, err)
		}
		return st, nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: pending turns: %w", err)
	}
	return out, nil
}

// inOrder is the ORDER BY (of keys) that makes a multi-row INSERT draw its
// ids (seqs) in queue order, and nothing for one row: a single row is in
// order already, and the Sort node costs PostgreSQL ≈ 4 µs a statement
// (its tuplesort is begun, filled and ended even for one row) — the tap's
// turn and each card edit's outbox row are single-row inserts, three to
// five sorts per approved execution (BENCHMARKS.md "Issue 26 — PostgreSQL
// statements per execution"). The two texts are prepared apart, each
// keeping its generic plan.
func inOrder(rows int, keys string) string {
	if rows <= 1 {
		return ""
	}
	return " ORDER BY " + keys
}
