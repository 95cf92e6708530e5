package outbox

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/storetest"
)

// Card edits handed to a lane in memory (store.Queued, issue 26): the lane
// delivers them without reading them back, with the ref their insert read,
// unless it may not trust that ref or the order.

// handWorld is one store (this instance) with an outbox delivering to a
// cardChannel, and the reads its lanes make.
type handWorld struct {
	t     *testing.T
	ctx   context.Context
	dsn   string
	st    *store.Store
	reads *storetest.JobReads
	ch    *cardChannel
	ob    *Outbox
}

// newHandWorld: instance, when set, is this store's instance id.
func newHandWorld(t *testing.T, instance string) *handWorld {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &handWorld{t: t, ctx: ctx, dsn: storetest.NewDatabase(t), reads: &storetest.JobReads{}, ch: &cardChannel{}}
	st, err := store.Open(ctx, w.dsn, store.Options{QueryTracer: w.reads})
	if err != nil {
		t.Fatal(err)
	}
	if instance != "" {
		st.SetInstance(instance)
	}
	w.st = st
	w.ob = New(Config{Store: st, Channels: map[core.ChannelName]core.Channel{"test": w.ch},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now, MaxBackoff: time.Minute})
	done := make(chan struct{})
	go func() { defer close(done); w.ob.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; st.Close() })
	w.waitIdle() // Run's own scan
	return w
}

// queue commits jobs through st, each a new message or an edit of a card,
// and returns them as the transaction hands them over.
func (w *handWorld) queue(st *store.Store, conv core.ConversationID, jobs ...core.OutboxJob) []store.Queued {
	w.t.Helper()
	var out []store.Queued
	if err := st.Do(w.ctx, func(_ context.Context, tx *store.Tx) ([]audit.Entry, error) {
		out = nil
		for _, j := range jobs {
			j.Message.Conversation = conv
			if err := tx.QueueMessageHanded("test", j.Op, j.MessageKey, j.Message, func(q store.Queued) { out = append(out, q) }); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}); err != nil {
		w.t.Fatal(err)
	}
	if len(out) != len(jobs) {
		w.t.Fatalf("%d of %d jobs handed over", len(out), len(jobs))
	}
	return out
}

// waitIdle waits until no lane runs (each ended after its last delivery
// was recorded).
func (w *handWorld) waitIdle() {
	w.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.ob.mu.Lock()
		idle := w.ob.lanesCtx != nil && len(w.ob.lanes) == 0
		w.ob.mu.Unlock()
		if idle {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatal("the lanes did not end")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (w *handWorld) status(key string) string {
	w.t.Helper()
	return dbString(w.t, w.st, `SELECT string_agg(status, ' ' ORDER BY id) FROM outbox WHERE message_key = '`+key+`'`)
}

func edit(key string, s cards.Status) core.OutboxJob {
	return core.OutboxJob{Op: core.OpUpdate, MessageKey: key, Message: card(key, s)}
}

func send(key string, s cards.Status) core.OutboxJob {
	return core.OutboxJob{Op: core.OpSend, MessageKey: key, Message: card(key, s)}
}

// TestHandedEditsFromMemory: alone on the database, a card's edits handed
// over by the transaction that queued them are delivered without a read:
// in place, on the message whose ref their insert read, and an edit that a
// newer one handed over with it supersedes is not shown (as NextOutboxJob
// would have said). Before, each edit was read back (two reads here).
func TestHandedEditsFromMemory(t *testing.T) {
	t.Parallel()
	w := newHandWorld(t, "")
	const conv core.ConversationID = "test:memory"
	w.ob.HandOff(conv, w.queue(w.st, conv, send("card-mem", cards.StatusPending)), 0)
	w.waitIdle()
	before := w.reads.Count()
	handed := w.queue(w.st, conv, edit("card-mem", cards.StatusRunning), edit("card-mem", cards.StatusDone))
	if handed[0].Ref != "ref-1" || handed[1].Ref != "ref-1" {
		t.Fatalf("handed over with refs %q, %q; want the card's ref-1", handed[0].Ref, handed[1].Ref)
	}
	w.ob.HandOff(conv, handed, 0)
	w.waitIdle()
	if n := w.reads.Count() - before; n != 0 {
		t.Fatalf("the lane read %d jobs back; want none", n)
	}
	sent, edits := w.ch.shown()
	if len(sent) != 1 || len(edits) != 1 || edits[0] != "ref-1=card-mem:done" {
		t.Fatalf("sent %q, edits %q; want the card once and one edit to done in place", sent, edits)
	}
	// Their marks are lazy: each commits with the next transaction.
	deadline := time.Now().Add(10 * time.Second)
	for s := w.status("card-mem"); s != "delivered superseded delivered"; s = w.status("card-mem") {
		if time.Now().After(deadline) {
			t.Fatalf("jobs are %q, want delivered superseded delivered", s)
		}
		if err := w.st.Do(w.ctx, nothing); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHandedEditBehindOlderJob: an edit handed over while an older job of
// the conversation is pending that only the database knows — here the
// card's own first message, so the edit's insert read no ref. The lane
// delivers the card first (as a new message: its ref is recorded), and
// the edit, whose ref may have changed since (it did), is read back and
// shown in place on that message. Checked to fail without
// store.RefRecorded after the card's delivery: the edit, trusted with no
// ref, showed the card a second time as a new message.
func TestHandedEditBehindOlderJob(t *testing.T) {
	t.Parallel()
	w := newHandWorld(t, "")
	const conv core.ConversationID = "test:older"
	w.queue(w.st, conv, send("card-old", cards.StatusPending)) // not handed over
	handed := w.queue(w.st, conv, edit("card-old", cards.StatusRunning))
	if handed[0].Ref != "" {
		t.Fatalf("the edit was handed over with ref %q before its card was sent", handed[0].Ref)
	}
	w.ob.HandOff(conv, handed, 1)
	w.waitIdle()
	sent, edits := w.ch.shown()
	if len(sent) != 1 || sent[0] != "card-old:pending" || len(edits) != 1 || edits[0] != "ref-1=card-old:running" {
		t.Fatalf("sent %q, edits %q; want the card, then its edit in place", sent, edits)
	}
}

// TestHandedEditLaneHeldElsewhere: two instances. An edit queued on A and
// handed to A's lane while B holds the conversation's lane: A sends
// nothing (it may not even trust the order of its memory with another
// instance about) and its lane ends; B's lane delivers the edit, read
// from the database, on the card's message as B knows it — B had sent the
// card anew (a new ref) after A's insert read the old one.
func TestHandedEditLaneHeldElsewhere(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stA, stB := twoInstances(ctx, t)
	const conv core.ConversationID = "test:held"
	chA, chB := &cardChannel{}, &cardChannel{}
	mk := func(st *store.Store, ch *cardChannel) *Outbox {
		return New(Config{Store: st, Channels: map[core.ChannelName]core.Channel{"test": ch}, Cluster: withOthers{},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now, MaxBackoff: time.Minute})
	}
	obA, obB := mk(stA, chA), mk(stB, chB)
	w := &handWorld{t: t, ctx: ctx, st: stA, ob: obA, ch: chA}
	// The card, delivered (ref-old), before either outbox runs.
	sent := w.queue(stB, conv, send("card-held", cards.StatusPending))[0]
	markAs(t, stB, sent.OutboxJob, "ref-old")
	var wg sync.WaitGroup
	for _, ob := range []*Outbox{obA, obB} {
		wg.Add(1)
		go func() { defer wg.Done(); ob.Run(ctx) }()
	}
	defer func() { cancel(); wg.Wait() }()
	w.waitIdle()
	if ok, _, err := stB.ClaimLane(ctx, conv, 0); err != nil || !ok {
		t.Fatalf("B claims the lane: %v %v", ok, err)
	}
	handed := w.queue(stA, conv, edit("card-held", cards.StatusRunning))
	// B, holding the lane, shows the card anew (a new message).
	markAs(t, stB, sent.OutboxJob, "ref-new")
	obA.HandOff(conv, handed, 0)
	w.waitIdle()
	if s, e := chA.shown(); len(s)+len(e) != 0 {
		t.Fatalf("A, whose lane B holds, sent %q and edited %q", s, e)
	}
	if !pendingOf(t, stA, conv) {
		t.Fatal("the edit is not pending any more, yet nobody delivered it")
	}
	if err := stB.ReleaseLane(ctx, conv); err != nil {
		t.Fatal(err)
	}
	obB.Kick(conv, -1) // B's recovery scan
	deadline := time.Now().Add(10 * time.Second)
	for pendingOf(t, stB, conv) {
		if time.Now().After(deadline) {
			t.Fatal("B did not deliver the edit")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if s, e := chB.shown(); len(s) != 0 || len(e) != 1 || e[0] != "ref-new=card-held:running" {
		t.Fatalf("B sent %q and edited %q; want the edit on the card's new message", s, e)
	}
	if s, e := chA.shown(); len(s)+len(e) != 0 {
		t.Fatalf("A sent %q and edited %q", s, e)
	}
}

// TestHandedEditRefChangedElsewhere: this instance is alone when it hands
// an edit over, but its insert read the card's ref before another
// instance (gone by now, or not seen yet) sent the card anew. This
// instance's heartbeat saw that other instance meanwhile: the lane reads
// the edit back and edits the card's new message, not the old one.
// Checked to fail without the heartbeat's count (store.Heartbeat): the
// edit went to ref-old.
//
// Not parallel: the heartbeat's count is process-wide (it makes every
// lane of the process read its handed edits back once).
func TestHandedEditRefChangedElsewhere(t *testing.T) {
	w := newHandWorld(t, "instance-self")
	const conv core.ConversationID = "test:elsewhere"
	other, err := store.Open(w.ctx, w.dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	other.SetInstance("instance-other")
	if err := other.RegisterInstance(w.ctx, "host", 2, time.Minute); err != nil {
		t.Fatal(err)
	}
	sent := w.queue(other, conv, send("card-else", cards.StatusPending))[0]
	markAs(t, other, sent.OutboxJob, "ref-old")
	handed := w.queue(w.st, conv, edit("card-else", cards.StatusDone))
	if handed[0].Ref != "ref-old" {
		t.Fatalf("handed over with ref %q, want ref-old", handed[0].Ref)
	}
	markAs(t, other, sent.OutboxJob, "ref-new") // the other instance re-sent the card
	if _, _, err := w.st.Heartbeat(w.ctx, "host", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	w.ob.HandOff(conv, handed, 0)
	w.waitIdle()
	if s, e := w.ch.shown(); len(s) != 0 || len(e) != 1 || e[0] != "ref-new=card-else:done" {
		t.Fatalf("sent %q, edited %q; want the edit on the card's new message", s, e)
	}
}

// markAs records j delivered by st with ref, as a lane of st's instance
// would (the card's message is ref).
func markAs(t *testing.T, st *store.Store, j core.OutboxJob, ref core.MessageRef) {
	t.Helper()
	if err := st.Do(context.Background(), func(_ context.Context, tx *store.Tx) ([]audit.Entry, error) {
		tx.QueueDelivered(j, ref, core.OutboxDelivered)
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
}
