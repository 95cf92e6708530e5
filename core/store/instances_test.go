package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

// TestTurnTakeoverFenced: instance A stores a pending turn and is taken
// for dead (its row expired); instance B adopts the turn. A, waking, can
// no longer finish it — its whole transaction fails with core.ErrFenced,
// so the reply it queued never commits — while B finishes it. Also:
// nothing of a live instance is adopted, and its lane cannot be claimed.
func TestTurnTakeoverFenced(t *testing.T) {
	t.Parallel()
	a, b, ctx := twoInstances(t)
	var seq int64
	if err := a.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		var err error
		seq, _, err = tx.InsertTurn(ctx, testTurn("webchat", "fence-1"))
		return nil, err
	}); err != nil {
		t.Fatal(err)
	}
	conv := testTurn("webchat", "fence-1").Conversation

	// A is alive: nothing to adopt, its lane not claimable by B.
	if got, err := b.AdoptTurns(ctx, "", 0); err != nil || len(got) != 0 {
		t.Fatalf("adopted from a live instance: %v %v", got, err)
	}
	if ok, _, err := a.ClaimLane(ctx, conv, 0); err != nil || !ok {
		t.Fatalf("A claims its lane: %v %v", ok, err)
	}
	if ok, _, err := b.ClaimLane(ctx, conv, 0); err != nil || ok {
		t.Fatalf("B claimed a live instance's lane: %v %v", ok, err)
	}
	if owner, alive, err := b.EarlierTurnOwner(ctx, conv, seq+1); err != nil || owner != "instance-a" || !alive {
		t.Fatalf("earlier turn owner = %q alive=%v err=%v", owner, alive, err)
	}

	// A is taken for dead: B adopts the turn and the lane.
	if err := a.StopInstance(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := b.AdoptTurns(ctx, "", 0)
	if err != nil || len(got) != 1 || got[0].Seq != seq {
		t.Fatalf("adopted = %v, %v; want turn %d", got, err, seq)
	}
	if ok, _, err := b.ClaimLane(ctx, conv, 0); err != nil || !ok {
		t.Fatalf("B claims the dead instance's lane: %v %v", ok, err)
	}

	finish := func(s *Store) error {
		return s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			tx.QueueFinishTurn(seq, core.TurnDone, "")
			return nil, tx.QueueMessage("webchat", core.OpSend, "r-"+core.NewID(), core.OutMessage{Conversation: conv, Text: "reply"})
		})
	}
	if err := finish(a); !errors.Is(err, core.ErrFenced) {
		t.Fatalf("the stale instance's finish = %v, want core.ErrFenced", err)
	}
	if n := count(t, a, `SELECT count(*) FROM outbox`); n != 0 {
		t.Fatalf("the fenced transaction left %d outbox rows", n)
	}
	if err := finish(b); err != nil {
		t.Fatalf("the adopting instance's finish: %v", err)
	}
	if n := count(t, a, `SELECT count(*) FROM turns WHERE status = 'done'`); n != 1 {
		t.Fatalf("turns done = %d", n)
	}
}

func count(t *testing.T, s *Store, q string) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(t.Context(), q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A stop notice names its origin (an instance id, which holds colons) and
// the executions to kill; a frame notice is not one.
func TestParseStopNotice(t *testing.T) {
	t.Parallel()
	tests := []struct {
		payload string
		origin  string
		ids     []core.ApprovalID
		ok      bool
	}{
		{"s:host:42:ab12:id1,id2", "host:42:ab12", []core.ApprovalID{"id1", "id2"}, true},
		{"s:i:id1", "i", []core.ApprovalID{"id1"}, true},
		{"s:i:", "", nil, false},
		{"s:id1", "", nil, false},
		{"f:12:host:42:ab12", "", nil, false},
	}
	for _, tt := range tests {
		origin, ids, ok := ParseStopNotice(tt.payload)
		if ok != tt.ok || origin != tt.origin || len(ids) != len(tt.ids) {
			t.Fatalf("ParseStopNotice(%q) = %q %v %v", tt.payload, origin, ids, ok)
		}
		for i := range ids {
			if ids[i] != tt.ids[i] {
				t.Fatalf("ParseStopNotice(%q) ids = %v", tt.payload, ids)
			}
		}
	}
}

// A hand-over notice names its origin, channel and conversation, each of
// which may hold colons; other notices and broken ones are not one.
func TestParseHandOverNotice(t *testing.T) {
	t.Parallel()
	tests := []struct {
		payload string
		origin  string
		ch      core.ChannelName
		conv    core.ConversationID
		ok      bool
	}{
		{`h:{"o":"host:42:ab","c":"whatsapp","v":"whatsapp:49151@s.whatsapp.net"}`, "host:42:ab", "whatsapp", "whatsapp:49151@s.whatsapp.net", true},
		{`h:{"o":"i","c":"whatsapp"}`, "", "", "", false},
		{`h:{"o":"i"`, "", "", "", false},
		{"s:i:id1", "", "", "", false},
		{"f:12:host:42:ab12", "", "", "", false},
	}
	for _, tt := range tests {
		origin, ch, conv, ok := ParseHandOverNotice(tt.payload)
		if ok != tt.ok || origin != tt.origin || ch != tt.ch || conv != tt.conv {
			t.Errorf("ParseHandOverNotice(%q) = %q %q %q %v", tt.payload, origin, ch, conv, ok)
		}
	}
}

// TestFencedFinishWithKnownHead: the fence holds when the writer sends
// COMMIT in the round trip of the finish (it knows the chain's head from
// its last commit): the stale instance's transaction fails with
// core.ErrFenced on the server and commits nothing it queued.
func TestFencedFinishWithKnownHead(t *testing.T) {
	t.Parallel()
	a, b, ctx := twoInstances(t)
	var seq int64
	if err := a.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		var err error
		seq, _, err = tx.InsertTurn(ctx, testTurn("webchat", "fence-head"))
		return []audit.Entry{{Kind: "test.stored", Actor: "test"}}, err
	}); err != nil {
		t.Fatal(err)
	}
	conv := testTurn("webchat", "fence-head").Conversation
	if err := a.StopInstance(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := b.AdoptTurns(ctx, "", 0); err != nil || len(got) != 1 {
		t.Fatalf("adopted = %v, %v", got, err)
	}
	finish := func(s *Store) error {
		return s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			tx.QueueFinishTurn(seq, core.TurnDone, "")
			if err := tx.QueueMessage("webchat", core.OpSend, "r-"+core.NewID(), core.OutMessage{Conversation: conv, Text: "reply"}); err != nil {
				return nil, err
			}
			return []audit.Entry{{Kind: "test.finished", Actor: "test"}}, nil
		})
	}
	if err := finish(a); !errors.Is(err, core.ErrFenced) {
		t.Fatalf("the stale instance's finish = %v, want core.ErrFenced", err)
	}
	if n := count(t, a, `SELECT count(*) FROM outbox`); n != 0 {
		t.Fatalf("the fenced transaction left %d outbox rows", n)
	}
	if n := count(t, a, `SELECT count(*) FROM audit_log WHERE kind = 'test.finished'`); n != 0 {
		t.Fatalf("the fenced transaction left %d audit entries", n)
	}
	if err := finish(b); err != nil {
		t.Fatalf("the adopting instance's finish: %v", err)
	}
	if _, err := a.VerifyAudit(ctx); err != nil {
		t.Fatalf("audit chain: %v", err)
	}
}

// twoInstances is two stores on one database, registered as live
// instances "instance-a" and "instance-b".
// TestLaneReleasedPace: a lane given up stays released, with its time.
// Its instance claims it again at once; another live instance only once
// the pace it passes (the channel's per-conversation interval) has passed
// since the release — until then ClaimLane says how long to wait. A lane
// held (not released) is not claimable, and says no wait.
func TestLaneReleasedPace(t *testing.T) {
	t.Parallel()
	a, b, ctx := twoInstances(t)
	const conv core.ConversationID = "test:paced"
	claim := func(s *Store, pace time.Duration) (bool, time.Duration) {
		t.Helper()
		ok, wait, err := s.ClaimLane(ctx, conv, pace)
		if err != nil {
			t.Fatal(err)
		}
		return ok, wait
	}
	release := func(s *Store) {
		t.Helper()
		if err := s.ReleaseLane(ctx, conv); err != nil {
			t.Fatal(err)
		}
	}
	if ok, _ := claim(a, time.Hour); !ok {
		t.Fatal("A could not claim a free lane")
	}
	if ok, wait := claim(b, time.Hour); ok || wait != 0 {
		t.Fatalf("B claimed A's held lane, or was told to wait: %v %s", ok, wait)
	}
	release(a)
	if ok, _ := claim(a, time.Hour); !ok {
		t.Fatal("A could not claim again the lane it released")
	}
	release(a)
	if ok, wait := claim(b, time.Hour); ok || wait < 59*time.Minute || wait > time.Hour {
		t.Fatalf("B, within the pace of A's release: claimed=%v wait=%s; want not claimed, wait ≈ 1h", ok, wait)
	}
	if ok, _ := claim(b, 0); !ok {
		t.Fatal("B could not claim the lane released longer than the pace ago")
	}
	if ok, wait := claim(a, 0); ok || wait != 0 {
		t.Fatalf("A claimed B's held lane, or was told to wait: %v %s", ok, wait)
	}
}

func twoInstances(t *testing.T) (a, b *Store, ctx context.Context) {
	t.Helper()
	a, ctx, dsn := setupDSN(t, Options{})
	b = openStore(t, dsn, Options{})
	a.SetInstance("instance-a")
	b.SetInstance("instance-b")
	for _, s := range []*Store{a, b} {
		if err := s.RegisterInstance(ctx, "host", 1, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	return a, b, ctx
}

// TestFinishManyFenced: finishing several turns in one transaction, one
// of which another instance adopted, fails the whole transaction with
// core.ErrFenced — whether the finishes go as one statement each (up to
// singleRowMax) or as one multi-row statement — and finishes none.
func TestFinishManyFenced(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, singleRowMax, singleRowMax + 3} {
		a, _, ctx := twoInstances(t)
		seqs := make([]int64, n)
		for i := range seqs {
			ev := fmt.Sprintf("many-%d-%d", n, i)
			if err := a.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
				var err error
				seqs[i], _, err = tx.InsertTurn(ctx, testTurn("webchat", ev))
				return nil, err
			}); err != nil {
				t.Fatal(err)
			}
		}
		// The last one was adopted by instance B.
		if _, err := a.pool.Exec(ctx, `UPDATE turns SET instance = 'instance-b' WHERE seq = $1`, seqs[n-1]); err != nil {
			t.Fatal(err)
		}
		err := a.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			for _, s := range seqs {
				tx.QueueFinishTurn(s, core.TurnDone, "")
			}
			return nil, tx.QueueMessage("webchat", core.OpSend, "r-"+core.NewID(), core.OutMessage{Conversation: "webchat:chat1", Text: "reply"})
		})
		if !errors.Is(err, core.ErrFenced) {
			t.Fatalf("%d finishes, one adopted: %v, want core.ErrFenced", n, err)
		}
		if got := count(t, a, `SELECT count(*) FROM turns WHERE status = 'done'`); got != 0 {
			t.Errorf("%d finishes, one adopted: %d turns finished, want 0", n, got)
		}
		if got := count(t, a, `SELECT count(*) FROM outbox`); got != 0 {
			t.Errorf("%d finishes, one adopted: the fenced transaction left %d outbox rows", n, got)
		}
		// Without the adopted one, the rest finish.
		if err := a.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			for _, s := range seqs[:n-1] {
				tx.QueueFinishTurn(s, core.TurnDone, "")
			}
			return nil, nil
		}); err != nil {
			t.Fatalf("%d finishes of its own turns: %v", n-1, err)
		}
		if got := count(t, a, `SELECT count(*) FROM turns WHERE status = 'done'`); got != n-1 {
			t.Errorf("%d turns finished, want %d", got, n-1)
		}
	}
}
