package outbox

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/storetest"
)

// cardChannel records what a platform would show: new messages (text or
// the card's intent and status) and edits (ref → the card's status).
type cardChannel struct {
	mu    sync.Mutex
	n     int
	sent  []string
	edits []string
}

func (c *cardChannel) Name() core.ChannelName                      { return "test" }
func (c *cardChannel) Run(ctx context.Context, _ core.Inbox) error { <-ctx.Done(); return nil }
func (c *cardChannel) Send(_ context.Context, m core.OutMessage) (core.MessageRef, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	s := m.Text
	if m.Card != nil {
		s = string(m.Card.ID) + ":" + string(m.Card.Status)
	}
	c.sent = append(c.sent, s)
	return core.MessageRef(fmt.Sprintf("ref-%d", c.n)), nil
}

func (c *cardChannel) Update(_ context.Context, ref core.MessageRef, m core.OutMessage) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.edits = append(c.edits, string(ref)+"="+string(m.Card.ID)+":"+string(m.Card.Status))
	return nil
}

func (c *cardChannel) shown() (sent, edits []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.sent...), append([]string(nil), c.edits...)
}

// markWorld is a database with a store whose lazy marks wait (nearly) for
// ever for company, so a test decides when they commit, and another store
// (another process, such as the engine's) that queues the jobs.
type markWorld struct {
	t    *testing.T
	ctx  context.Context
	dsn  string
	st   *store.Store
	side *store.Store
}

func newMarkWorld(t *testing.T) *markWorld {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := &markWorld{t: t, ctx: ctx, dsn: storetest.NewDatabase(t)}
	w.st, w.side = w.open(time.Hour), w.open(0)
	return w
}

func (w *markWorld) open(lazy time.Duration) *store.Store {
	st, err := store.Open(w.ctx, w.dsn, store.Options{LazyDelay: lazy})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(st.Close)
	return st
}

// run starts an outbox on st delivering to ch; stop ends it.
func (w *markWorld) run(st *store.Store, ch core.Channel) (ob *Outbox, stop func()) {
	ctx, cancel := context.WithCancel(w.ctx)
	ob = New(Config{Store: st, Channels: map[core.ChannelName]core.Channel{"test": ch},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now, MaxBackoff: time.Minute})
	done := make(chan struct{})
	go func() { defer close(done); ob.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	w.t.Cleanup(stop)
	return ob, stop
}

func (w *markWorld) queue(ob *Outbox, conv core.ConversationID, op core.OutboxOp, key string, m core.OutMessage) {
	w.t.Helper()
	m.Conversation = conv
	if err := w.side.Do(w.ctx, func(_ context.Context, tx *store.Tx) ([]audit.Entry, error) {
		return nil, tx.QueueMessage("test", op, key, m)
	}); err != nil {
		w.t.Fatal(err)
	}
	if ob != nil {
		ob.Kick(conv, 1)
	}
}

func card(id string, s cards.Status) core.OutMessage {
	return core.OutMessage{Card: &cards.Card{ID: cards.ID(id), Kind: cards.KindApproval, Intent: "Run it", Risk: cards.RiskLow, Status: s}}
}

// statusOf is the outbox status of key's jobs, oldest first, and the
// transaction (xmin) that wrote each.
func (w *markWorld) statusOf(key string) (status, xmins []string) {
	w.t.Helper()
	rows, err := w.st.Pool().Query(w.ctx, `SELECT status, xmin::text FROM outbox WHERE message_key = $1 ORDER BY id`, key)
	if err != nil {
		w.t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var s, x string
		if err := rows.Scan(&s, &x); err != nil {
			w.t.Fatal(err)
		}
		status, xmins = append(status, s), append(xmins, x)
	}
	return status, xmins
}

func (w *markWorld) waitFor(what string, cond func() bool) {
	w.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			w.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCardEditMarksRideAlong: the marks of card edits (in place: the card's
// message is known) cost no transaction of their own; they commit in the
// next transaction anyone runs, and the lanes do not wait for them. Before,
// each edit's mark was a commit of its own (DoBackground found no company),
// made before the lane went on.
func TestCardEditMarksRideAlong(t *testing.T) {
	t.Parallel()
	w := newMarkWorld(t)
	ch := &cardChannel{}
	ob, _ := w.run(w.st, ch)
	const n = 4
	for i := range n {
		conv := core.ConversationID(fmt.Sprintf("test:c%d", i))
		w.queue(ob, conv, core.OpSend, fmt.Sprintf("card%d", i), card(fmt.Sprintf("card%d", i), cards.StatusPending))
	}
	// The cards are new messages: marked before their lanes go on.
	for i := range n {
		key := fmt.Sprintf("card%d", i)
		w.waitFor(key+" delivered", func() bool { s, _ := w.statusOf(key); return len(s) == 1 && s[0] == "delivered" })
	}
	for i := range n {
		conv := core.ConversationID(fmt.Sprintf("test:c%d", i))
		w.queue(ob, conv, core.OpUpdate, fmt.Sprintf("card%d", i), card(fmt.Sprintf("card%d", i), cards.StatusDone))
	}
	w.waitFor("the edits", func() bool { _, e := ch.shown(); return len(e) == n })
	time.Sleep(50 * time.Millisecond) // time for a mark that would commit alone
	for i := range n {
		if s, _ := w.statusOf(fmt.Sprintf("card%d", i)); s[1] != "pending" {
			t.Fatalf("card%d's edit is %s before any other transaction ran; want its mark waiting for one", i, s[1])
		}
	}
	// Someone else's transaction (here: one audit entry).
	var xid string
	if err := w.st.Do(w.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		return []audit.Entry{{Kind: audit.KindMessageSend, Actor: "test", Data: map[string]any{"n": 1}}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.st.Pool().QueryRow(w.ctx, `SELECT xmin::text FROM audit_log WHERE actor = 'test'`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		s, x := w.statusOf(fmt.Sprintf("card%d", i))
		if s[1] != "delivered" || x[1] != xid {
			t.Fatalf("card%d's edit is %s, written by transaction %s; want delivered in the next transaction (%s)", i, s[1], x[1], xid)
		}
	}
	if sent, edits := ch.shown(); len(sent) != n || len(edits) != n {
		t.Fatalf("shown %q and edits %q; want each card once and each edit once", sent, edits)
	}
	var kinds string
	if err := w.st.Pool().QueryRow(w.ctx, `SELECT count(*) FILTER (WHERE kind = 'message.update')::text FROM audit_log`).Scan(&kinds); err != nil {
		t.Fatal(err)
	}
	if kinds != fmt.Sprint(n) {
		t.Fatalf("%s message.update entries, want %d", kinds, n)
	}
}

// TestUnmarkedEditRepeatedNotTheMessage: an instance delivers a new
// message and then two edits of a card, and is killed before the edits'
// marks commit. Another instance (or the restarted one) finds the edits
// pending: it shows the card's last state again — an identical edit, which
// no platform shows twice — and skips the older, superseded one. The new
// message, whose mark the lane waited for, is never sent again. Meanwhile
// the first instance itself does not repeat what it delivered while the
// marks are on their way (a read of the conversation, a recovery scan).
func TestUnmarkedEditRepeatedNotTheMessage(t *testing.T) {
	t.Parallel()
	w := newMarkWorld(t)
	const conv core.ConversationID = "test:kill"
	chA := &cardChannel{}
	obA, _ := w.run(w.st, chA)
	w.queue(obA, conv, core.OpSend, "c1", card("c1", cards.StatusPending))
	w.waitFor("the card", func() bool { s, _ := w.statusOf("c1"); return len(s) == 1 && s[0] == "delivered" })
	w.queue(obA, conv, core.OpSend, "hello", core.OutMessage{Text: "hello"})
	w.waitFor("the message", func() bool { s, _ := w.statusOf("hello"); return len(s) == 1 && s[0] == "delivered" })
	w.queue(obA, conv, core.OpUpdate, "c1", card("c1", cards.StatusApproved))
	w.waitFor("the first edit", func() bool { _, e := chA.shown(); return len(e) == 1 })
	w.queue(obA, conv, core.OpUpdate, "c1", card("c1", cards.StatusDone))
	w.waitFor("the second edit", func() bool { _, e := chA.shown(); return len(e) == 2 })
	if err := obA.Scan(w.ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	sentA, editsA := chA.shown()
	if strings.Join(sentA, " ") != "c1:pending hello" || strings.Join(editsA, " ") != "ref-1=c1:approved ref-1=c1:done" {
		t.Fatalf("instance A showed %q and edits %q; want each once", sentA, editsA)
	}
	if s, _ := w.statusOf("c1"); strings.Join(s, " ") != "delivered pending pending" {
		t.Fatalf("c1's jobs are %q; want the edits' marks still on their way", s)
	}
	// A is killed here: its marks never commit (its store's writer holds
	// them; nothing else runs there). B takes the conversation over.
	stB := w.open(20 * time.Millisecond) // its marks commit soon
	chB := &cardChannel{}
	w.run(stB, chB)
	w.waitFor("B's delivery", func() bool {
		s, _ := w.statusOf("c1")
		return strings.Join(s, " ") == "delivered superseded delivered"
	})
	sentB, editsB := chB.shown()
	if len(sentB) != 0 || strings.Join(editsB, " ") != "ref-1=c1:done" {
		t.Fatalf("instance B sent %q and edits %q; want only the card's last state again, as an edit", sentB, editsB)
	}
}

type plainAnswerer struct{}

func (plainAnswerer) AnswerTap(context.Context, core.TapAnswer) error { return nil }

type quietAnswerer struct{ plainAnswerer }

func (quietAnswerer) AnswerRepeatable(a core.TapAnswer) bool { return a.Handle != "" }

// Which deliveries are recorded lazily: only those a repeat shows nobody.
func TestRepeatable(t *testing.T) {
	t.Parallel()
	edits := core.Capabilities{EditInPlace: true, Buttons: true}
	noEdits := core.Capabilities{Buttons: true}
	c := card("c1", cards.StatusApproved)
	answer := func(a core.TapAnswer, m core.OutMessage) core.OutboxJob {
		return core.OutboxJob{Op: core.OpAnswer, Answer: &a, Message: m}
	}
	approved := core.TapAnswer{Handle: "q1", Text: "Approved: running it now."}
	refused := core.TapAnswer{Handle: "q1", Text: "You may not decide this request.", Refused: core.RefusedNotApprover}
	for _, tc := range []struct {
		name       string
		j          core.OutboxJob
		caps       core.Capabilities
		prev       core.MessageRef
		superseded bool
		ta         core.TapAnswerer
		want       bool
	}{
		{"a new message", core.OutboxJob{Op: core.OpSend, Message: core.OutMessage{Text: "hi"}}, edits, "", false, nil, false},
		{"a card edited in place", core.OutboxJob{Op: core.OpUpdate, Message: c}, edits, "ref", false, nil, true},
		{"a superseded edit", core.OutboxJob{Op: core.OpUpdate, Message: c}, edits, "ref", true, nil, true},
		{"an edit of a card never delivered (a new message)", core.OutboxJob{Op: core.OpUpdate, Message: c}, edits, "", false, nil, false},
		{"an edit where the channel cannot edit (a new message)", core.OutboxJob{Op: core.OpUpdate, Message: c}, noEdits, "ref", false, nil, false},
		{"an answer as an edit, no AnswerTap", answer(approved, c), edits, "ref", false, nil, true},
		{"a refusal's notice as a message, no AnswerTap", answer(refused, c), edits, "ref", false, nil, false},
		{"an answer whose card goes as a new message", answer(approved, c), edits, "", false, nil, false},
		{"an answer through AnswerTap, repeat unknown", answer(approved, c), edits, "ref", false, plainAnswerer{}, false},
		{"an answer through AnswerTap the channel says repeats quietly", answer(approved, c), edits, "ref", false, quietAnswerer{}, true},
		{"the same without the tap's query", answer(core.TapAnswer{Text: "x"}, c), edits, "ref", false, quietAnswerer{}, false},
	} {
		if got := repeatable(tc.j, tc.caps, tc.prev, tc.superseded, tc.ta); got != tc.want {
			t.Errorf("%s: repeatable = %v, want %v", tc.name, got, tc.want)
		}
	}
}
