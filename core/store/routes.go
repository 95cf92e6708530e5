package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/core"
)

// QueueApprovalRoutes stores where an approval request's card was routed
// (core/route): its status card and copies. The approval must have been
// inserted or read in this transaction first.
func (t *Tx) QueueApprovalRoutes(routes []core.ApprovalRoute) error {
	for _, r := range routes {
		if err := t.parent("route", r.Approval); err != nil {
			return err
		}
		t.later("insert approval route", `INSERT INTO approval_routes (approval_id, channel, conversation, message_key, kind, identity)
			VALUES ($1, $2, $3, $4, $5, $6)`, r.Approval, r.Channel, r.Conversation, r.MessageKey, r.Kind, r.Identity)
		// A copy's conversation is kicked after the commit (OnFanOut), so
		// it is delivered at once whoever queued it.
		if r.Kind == core.RouteCopy && !slices.Contains(t.fanned, r.Conversation) {
			t.fanned = append(t.fanned, r.Conversation)
		}
	}
	return nil
}

// ApprovalRoute reads the route of approval id into conversation conv;
// core.ErrNotFound when the request was not routed there.
func (t *Tx) ApprovalRoute(ctx context.Context, id core.ApprovalID, conv core.ConversationID) (core.ApprovalRoute, error) {
	r, err := scanRoute(t.queryRow(ctx, routeSelect+` WHERE approval_id = $1 AND conversation = $2`, id, conv))
	return r, notFound(err)
}

// ApprovalRoutes lists where approval id was routed (none: it was not),
// the status card first.
func (s *Store) ApprovalRoutes(ctx context.Context, id core.ApprovalID) ([]core.ApprovalRoute, error) {
	rows, err := s.pool.Query(ctx, routeSelect+` WHERE approval_id = $1 ORDER BY kind DESC, channel, conversation`, id)
	if err != nil {
		return nil, fmt.Errorf("store: approval routes: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (core.ApprovalRoute, error) { return scanRoute(r) })
	if err != nil {
		return nil, fmt.Errorf("store: approval routes: %w", err)
	}
	return out, nil
}

const routeSelect = `SELECT approval_id, channel, conversation, message_key, kind, identity FROM approval_routes`

func scanRoute(row pgx.Row) (core.ApprovalRoute, error) {
	var r core.ApprovalRoute
	err := row.Scan(&r.Approval, &r.Channel, &r.Conversation, &r.MessageKey, &r.Kind, &r.Identity)
	return r, err
}

// SpokeIn reports whether any of ids sent a turn in conversation conv:
// whether an owner is known to be present in a group.
func (s *Store) SpokeIn(ctx context.Context, conv core.ConversationID, ids []core.IdentityID) (bool, error) {
	if len(ids) == 0 {
		return false, nil
	}
	strs := make([]string, len(ids))
	for i, id := range ids {
		strs[i] = string(id)
	}
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM turns WHERE conversation = $1 AND sender = ANY($2))`, conv, strs).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("store: spoke in: %w", err)
	}
	return ok, nil
}

// fanOutSQL queues, for each inserted edit of a card (an update, or a
// tap's answer carrying the card) whose message is one of an approval
// request's routed messages, an update of each of that request's other
// routed messages: every copy and the status card show every state. The
// status card gets the card without its choices (the requesting
// conversation cannot decide it). It reads the rows its INSERT …
// RETURNING produced (ins) and returns the conversations it queued for.
// jobs is how many rows ins inserts: with several, the copies are
// inserted in the order of their edits (ids ascend in delivery order in
// each conversation); with one, its copies go to distinct conversations
// (a request has one route per conversation), so their order is nobody's
// and the statement goes without the Sort (inOrder).
func fanOutSQL(jobs int) string {
	return `, fan AS (
	INSERT INTO outbox (channel, conversation, op, message_key, payload, secret_output, created_at, next_at)
	SELECT r.channel, r.conversation, 'update', r.message_key,
		jsonb_set(CASE WHEN r.kind = 'status' THEN (i.payload - 'tap_answer') #- '{card,choices}' ELSE i.payload - 'tap_answer' END,
			'{conversation}', to_jsonb(r.conversation)),
		i.secret_output, $6, $6
	FROM ins i
	JOIN approval_routes r0 ON r0.channel = i.channel AND r0.message_key = i.message_key
	JOIN approval_routes r ON r.approval_id = r0.approval_id AND r.conversation <> r0.conversation
	WHERE i.op IN ('update', 'answer') AND jsonb_typeof(i.payload->'card') = 'object'` +
		inOrder(jobs, "i.id, r.channel, r.conversation") + `
	RETURNING conversation)`
}

// OnFanOut sets what is told, after a commit, each conversation an edit of
// a routed card was fanned out to (the outbox's Kick, so the copies are
// delivered at once rather than at the next recovery scan).
func (s *Store) OnFanOut(f func(core.ConversationID)) { s.fanOut.Store(&f) }

func (s *Store) fannedOut(convs []core.ConversationID) {
	f := s.fanOut.Load()
	if f == nil || *f == nil {
		return
	}
	for _, c := range convs {
		(*f)(c)
	}
}
