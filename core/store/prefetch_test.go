package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

// tapTurn is a tap on card in conv.
func tapTurn(ev string, conv core.ConversationID, card string) core.Turn {
	t := testTurn("webchat", ev)
	t.Conversation, t.Text = conv, ""
	t.Tap = &core.Tap{Card: cards.ID(card), Choice: "approve"}
	return t
}

// routeAnswer is GetApprovalRoute's answer.
type routeAnswer struct {
	a                 core.ApprovalRequest
	r                 core.ApprovalRoute
	routeErr, err     error
	trips             int // round trips GetApprovalRoute sent
	withInsert, fresh bool
}

// prefetchSetup: "ap1", requested in webchat:local, routed as a copy to
// webchat:approver; "ap2" in webchat:local, not routed.
func prefetchSetup(t *testing.T) (*Store, context.Context, *roundTrips) {
	t.Helper()
	rt := &roundTrips{}
	s, ctx, _ := setupDSN(t, Options{QueryTracer: rt})
	mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		tx.QueueApproval(testApproval("ap1", tx.Now()))
		tx.QueueApproval(testApproval("ap2", tx.Now()))
		return nil, tx.QueueApprovalRoutes([]core.ApprovalRoute{
			{Approval: "ap1", Channel: "webchat", Conversation: "webchat:local", MessageKey: "ap1", Kind: core.RouteStatus},
			{Approval: "ap1", Channel: "webchat", Conversation: "webchat:approver", MessageKey: "ap1-copy", Kind: core.RouteCopy, Identity: "webchat:approver"},
		})
	})
	return s, ctx, rt
}

// readAfterInsert stores turn inline and then, after between (if any),
// reads request id's route into conv, in one transaction, rolled back.
func readAfterInsert(t *testing.T, ctx context.Context, s *Store, rt *roundTrips, turn core.Turn, between func(tx *Tx) error, id core.ApprovalID, conv core.ConversationID) routeAnswer {
	t.Helper()
	var ans routeAnswer
	errRollback := errors.New("rolled back")
	err := s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		_, dup, err := tx.InsertInlineTurn(ctx, turn)
		if err != nil {
			return nil, err
		}
		ans.fresh = !dup
		ans.withInsert = false
		for _, q := range rt.last() {
			if strings.Contains(q, "FROM approvals WHERE id = $1 FOR UPDATE") {
				ans.withInsert = true
			}
		}
		if between != nil {
			if err := between(tx); err != nil {
				return nil, err
			}
		}
		n := rt.count()
		ans.a, ans.r, ans.routeErr, ans.err = tx.GetApprovalRoute(ctx, id, conv)
		ans.trips = rt.count() - n
		return nil, errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatal(err)
	}
	return ans
}

// TestTapPrefetchAnswers: a tap stored inline sends the read of its card's
// request and route with its turn's insert, and GetApprovalRoute answers
// from it without a round trip — what a read of its own answers: the
// request and its route, the request in a conversation it was not routed
// to (core/decide refuses it as an unknown card), and no request at all
// (a card of another kind, or none).
func TestTapPrefetchAnswers(t *testing.T) {
	t.Parallel()
	s, ctx, rt := prefetchSetup(t)
	cases := []struct {
		name string
		id   core.ApprovalID
		conv core.ConversationID
		// want: a found, a route found.
		found, routed bool
	}{
		{"requesting conversation", "ap1", "webchat:local", true, true},
		{"routed copy", "ap1", "webchat:approver", true, true},
		{"not routed there", "ap1", "webchat:elsewhere", true, false},
		{"not routed at all", "ap2", "webchat:approver", true, false},
		{"unknown card", "nope", "webchat:local", false, false},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := readAfterInsert(t, ctx, s, rt, tapTurn(fmt.Sprintf("tap-%d", i), c.conv, string(c.id)), nil, c.id, c.conv)
			if !got.fresh || !got.withInsert || got.trips != 0 {
				t.Fatalf("stored %v, read with the insert %v, GetApprovalRoute's round trips %d; want true, true, 0", got.fresh, got.withInsert, got.trips)
			}
			// The same read, not prefetched: a text turn's insert reads
			// nothing ahead.
			want := readAfterInsert(t, ctx, s, rt, testTurn("webchat", fmt.Sprintf("text-%d", i)), nil, c.id, c.conv)
			if want.withInsert || want.trips != 1 {
				t.Fatalf("text turn: read with the insert %v, GetApprovalRoute's round trips %d; want false, 1", want.withInsert, want.trips)
			}
			if !reflect.DeepEqual(got.a, want.a) || !reflect.DeepEqual(got.r, want.r) ||
				!errors.Is(got.err, want.err) || !errors.Is(got.routeErr, want.routeErr) {
				t.Fatalf("prefetched: %+v, %+v, %v, %v\nread:       %+v, %+v, %v, %v", got.a, got.r, got.routeErr, got.err, want.a, want.r, want.routeErr, want.err)
			}
			if found := got.err == nil; found != c.found {
				t.Fatalf("request found %v (err %v), want %v", found, got.err, c.found)
			}
			if !c.found && !errors.Is(got.err, core.ErrNotFound) {
				t.Fatalf("unknown card: err %v, want core.ErrNotFound", got.err)
			}
			if c.found && (got.a.ID != c.id || got.a.Status != core.ApprovalPending) {
				t.Fatalf("request %s %s, want %s pending", got.a.ID, got.a.Status, c.id)
			}
			if routed := got.routeErr == nil; c.found && routed != c.routed {
				t.Fatalf("route found %v (%v), want %v", routed, got.routeErr, c.routed)
			}
			if c.found && !c.routed && !errors.Is(got.routeErr, core.ErrNotFound) {
				t.Fatalf("route error %v, want core.ErrNotFound", got.routeErr)
			}
			if c.routed && (got.r.Approval != c.id || got.r.Conversation != c.conv) {
				t.Fatalf("route %+v, want %s's into %s", got.r, c.id, c.conv)
			}
		})
	}
}

// TestTapPrefetchStrict: GetApprovalRoute answers from the prefetch only
// what a read now would: not after this transaction sent a statement
// (here the request's own decision) or queued one (here its withdrawal),
// not for another request or conversation, not a second time, and not
// for a duplicate tap (whose transaction decides nothing).
func TestTapPrefetchStrict(t *testing.T) {
	t.Parallel()
	s, ctx, rt := prefetchSetup(t)

	t.Run("after a statement sent", func(t *testing.T) {
		got := readAfterInsert(t, ctx, s, rt, tapTurn("sent", "webchat:local", "ap1"), func(tx *Tx) error {
			_, err := tx.TransitionApproval(ctx, "ap1", []core.ApprovalStatus{core.ApprovalPending}, core.ApprovalDeclined, "webchat:local", nil)
			return err
		}, "ap1", "webchat:local")
		if got.err != nil || got.a.Status != core.ApprovalDeclined || got.trips != 1 {
			t.Fatalf("status %s (err %v) in %d round trips; want declined, read anew", got.a.Status, got.err, got.trips)
		}
	})
	t.Run("after a statement queued", func(t *testing.T) {
		got := readAfterInsert(t, ctx, s, rt, tapTurn("queued", "webchat:local", "ap2"), func(tx *Tx) error {
			tx.QueueWithdrawApproval("ap2")
			return nil
		}, "ap2", "webchat:local")
		if !errors.Is(got.err, core.ErrNotFound) || got.trips != 1 {
			t.Fatalf("withdrawn request: err %v in %d round trips; want core.ErrNotFound, read anew", got.err, got.trips)
		}
	})
	t.Run("another request", func(t *testing.T) {
		got := readAfterInsert(t, ctx, s, rt, tapTurn("other-id", "webchat:local", "ap1"), nil, "ap2", "webchat:local")
		if got.err != nil || got.a.ID != "ap2" || got.trips != 1 {
			t.Fatalf("request %s (err %v) in %d round trips; want ap2, read anew", got.a.ID, got.err, got.trips)
		}
	})
	t.Run("another conversation", func(t *testing.T) {
		got := readAfterInsert(t, ctx, s, rt, tapTurn("other-conv", "webchat:local", "ap1"), nil, "ap1", "webchat:approver")
		if got.err != nil || got.routeErr != nil || got.r.MessageKey != "ap1-copy" || got.trips != 1 {
			t.Fatalf("route %+v (%v, %v) in %d round trips; want the copy's, read anew", got.r, got.routeErr, got.err, got.trips)
		}
	})
	t.Run("once", func(t *testing.T) {
		got := readAfterInsert(t, ctx, s, rt, tapTurn("twice", "webchat:local", "ap1"), func(tx *Tx) error {
			_, _, _, err := tx.GetApprovalRoute(ctx, "ap1", "webchat:local")
			return err
		}, "ap1", "webchat:local")
		if got.err != nil || got.trips != 1 {
			t.Fatalf("second read: err %v in %d round trips; want read anew", got.err, got.trips)
		}
	})
	t.Run("duplicate", func(t *testing.T) {
		tap := tapTurn("dup", "webchat:local", "ap1")
		mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			_, _, err := tx.InsertInlineTurn(ctx, tap)
			return nil, err
		})
		got := readAfterInsert(t, ctx, s, rt, tap, nil, "ap1", "webchat:local")
		if got.fresh || got.err != nil || got.a.ID != "ap1" || got.trips != 1 {
			t.Fatalf("duplicate: stored %v, request %s (err %v) in %d round trips; want a duplicate, ap1 read anew", got.fresh, got.a.ID, got.err, got.trips)
		}
		// The duplicate's transaction, which decides nothing, commits.
		var dup bool
		mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			var err error
			_, dup, err = tx.InsertInlineTurn(ctx, tap)
			return nil, err
		})
		if !dup {
			t.Fatal("a redelivered tap was stored again")
		}
	})
}
