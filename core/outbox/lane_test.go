package outbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/storetest"
)

// Jobs handed to a lane are delivered oldest first even when commits of one
// conversation land out of id order; a job whose id never arrived is read
// back from the database like any other.
func TestLaneAdd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		batches [][]int64 // ids handed over per commit (0: id unknown)
		n       []int     // jobs of each commit the lane must read
		mem     []int64
		expect  int
		reading bool
	}{
		{"in order", [][]int64{{1, 2}, {3}}, []int{0, 0}, []int64{1, 2, 3}, 0, false},
		{"commits out of id order", [][]int64{{5, 6}, {3, 4}}, []int{0, 0}, []int64{3, 4, 5, 6}, 0, false},
		{"an id that never arrived is read", [][]int64{{1, 0}}, []int{0}, []int64{1}, 1, true},
		{"edits are read", [][]int64{{1}}, []int{2}, []int64{1}, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &lane{}
			for i, b := range tt.batches {
				var jobs []store.Queued
				for _, id := range b {
					jobs = append(jobs, store.Queued{OutboxJob: core.OutboxJob{ID: id}})
				}
				l.add(jobs, tt.n[i])
			}
			var ids []int64
			for _, j := range l.mem {
				ids = append(ids, j.ID)
			}
			if len(ids) != len(tt.mem) {
				t.Fatalf("mem = %v, want %v", ids, tt.mem)
			}
			for i := range ids {
				if ids[i] != tt.mem[i] {
					t.Fatalf("mem = %v, want %v", ids, tt.mem)
				}
			}
			if l.expect != tt.expect || l.reading() != tt.reading {
				t.Fatalf("expect = %d, reading = %v; want %d, %v", l.expect, l.reading(), tt.expect, tt.reading)
			}
		})
	}
	l := &lane{}
	if l.add(nil, -1); !l.reading() {
		t.Fatal("an unknown count (the recovery scan) does not make the lane read")
	}
}

func TestMessageKind(t *testing.T) {
	t.Parallel()
	if messageKind(core.OpSend) != audit.KindMessageSend || messageKind(core.OpUpdate) != audit.KindMessageUpdate {
		t.Fatal("delivery audit kinds changed")
	}
}

// withOthers: other instances exist, this one's heartbeat is fresh.
type withOthers struct{}

func (withOthers) Solo() bool                   { return false }
func (withOthers) Fresh() (gen uint64, ok bool) { return 0, true }

// twoInstances opens two stores on one new database, registered as the
// live instances "instance-a" and "instance-b".
func twoInstances(ctx context.Context, t *testing.T) (a, b *store.Store) {
	t.Helper()
	dsn := storetest.NewDatabase(t)
	open := func(id string) *store.Store {
		st, err := store.Open(ctx, dsn, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		st.SetInstance(id)
		if err := st.RegisterInstance(ctx, "host", 1, time.Minute); err != nil {
			t.Fatal(err)
		}
		return st
	}
	return open("instance-a"), open("instance-b")
}

// TestLaneReadsUnderItsClaim: instance B's lane reads a conversation's
// oldest job while instance A holds the lane; before B claims, A delivers
// that job and the next and gives the lane up. B, claiming the free lane,
// must not send the job it read before its claim (already delivered, and
// a newer reply after it): it reads again under the claim and finds
// nothing. Without that read the chat saw first, second, first.
func TestLaneReadsUnderItsClaim(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := twoInstances(ctx, t)
	const conv core.ConversationID = "test:chat"
	var jobs []core.OutboxJob
	for _, text := range []string{"first", "second"} {
		m := core.OutMessage{Conversation: conv, Text: text}
		j := core.OutboxJob{Channel: "test", Conversation: conv, Op: core.OpSend, MessageKey: "k-" + text, Message: m}
		if err := a.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			return nil, tx.QueueMessageThen("test", core.OpSend, j.MessageKey, m, func(id int64) { j.ID = id })
		}); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	if ok, _, err := a.ClaimLane(ctx, conv, 0); err != nil || !ok {
		t.Fatalf("A claims the lane: %v %v", ok, err)
	}
	rec := &recorder{}
	var once sync.Once
	beforeClaim = func() {
		once.Do(func() {
			// A delivers both and drains, between B's read and B's claim.
			for _, j := range jobs {
				rec.Send(ctx, j.Message)
				if err := a.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
					tx.QueueDelivered(j, core.MessageRef(j.Message.Text), core.OutboxDelivered)
					return nil, nil
				}); err != nil {
					t.Error(err)
				}
			}
			if err := a.ReleaseLane(ctx, conv); err != nil {
				t.Error(err)
			}
		})
	}
	defer func() { beforeClaim = nil }()
	ob := New(Config{Store: b, Channels: map[core.ChannelName]core.Channel{"test": rec}, Cluster: withOthers{},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now})
	done := make(chan struct{})
	go func() { defer close(done); ob.Run(ctx) }()
	defer func() { cancel(); <-done }()
	// Run's own scan starts B's lane; wait until it ended.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ob.mu.Lock()
		idle := ob.lanesCtx != nil && len(ob.lanes) == 0
		ob.mu.Unlock()
		if idle && len(rec.list()) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B's lane did not end; sent %q", rec.list())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := rec.list(); len(got) != 2 || got[0] != "first" || got[1] != "second" {
		t.Fatalf("sent %q, want [first second]", got)
	}
}

// heldChannel is a channel that sends only while this instance holds its
// connection (core.HeldSender, as WhatsApp's device under its lease).
type heldChannel struct {
	recorder
	mu     sync.Mutex
	here   bool
	onHere func()
}

func (h *heldChannel) SendsHere() bool { h.mu.Lock(); defer h.mu.Unlock(); return h.here }
func (h *heldChannel) OnSendsHere(f func()) {
	h.mu.Lock()
	h.onHere = f
	h.mu.Unlock()
}

func (h *heldChannel) Send(ctx context.Context, m core.OutMessage) (core.MessageRef, error) {
	if !h.SendsHere() {
		return "", errors.New("not connected")
	}
	return h.recorder.Send(ctx, m)
}

// hold gives (or takes) the connection; given, the channel says so.
func (h *heldChannel) hold(here bool) {
	h.mu.Lock()
	h.here = here
	f := h.onHere
	h.mu.Unlock()
	if here && f != nil {
		f()
	}
}

// TestLaneHandsOverToTheConnectionHolder: two instances on one database,
// a channel only one of them can send on (WhatsApp's device). Jobs queued
// on the instance without the connection are delivered by the one with
// it, in order, once each; when the connection moves, the new holder
// delivers; while nobody holds it nothing is sent and nothing is lost,
// and the next holder delivers what waited once its connection is up.
//
// Checked to fail: without heldElsewhere, instance A's lane claims the
// conversation, fails its sends ("not connected") and keeps retrying with
// backoff while B cannot claim: the first wait times out.
func TestLaneHandsOverToTheConnectionHolder(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stA, stB := twoInstances(ctx, t)
	chA, chB := &heldChannel{}, &heldChannel{}
	var obA, obB *Outbox
	mk := func(st *store.Store, ch *heldChannel, other **Outbox) *Outbox {
		return New(Config{Store: st, Channels: map[core.ChannelName]core.Channel{"wa": ch}, Cluster: withOthers{},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now, MaxBackoff: time.Minute,
			// The cluster listener, in short: the notice reaches the other.
			Elsewhere: func(ch core.ChannelName, conv core.ConversationID) { (*other).Nudged(ch, conv) }})
	}
	obA, obB = mk(stA, chA, &obB), mk(stB, chB, &obA)
	var wg sync.WaitGroup
	for _, ob := range []*Outbox{obA, obB} {
		wg.Add(1)
		go func() { defer wg.Done(); ob.Run(ctx) }()
	}
	defer func() { cancel(); wg.Wait() }()

	const conv core.ConversationID = "wa:chat"
	n := 0
	// queue enqueues k messages through st and kicks its outbox, as a
	// worker that answered a turn there does.
	queue := func(st *store.Store, ob *Outbox, k int) {
		for range k {
			n++
			m := core.OutMessage{Conversation: conv, Text: fmt.Sprintf("m%02d", n)}
			if err := st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
				return nil, tx.QueueMessageThen("wa", core.OpSend, fmt.Sprintf("k-%d", n), m, func(int64) {})
			}); err != nil {
				t.Fatal(err)
			}
			ob.Kick(conv, 1)
		}
	}
	waitSent := func(what string, total int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for len(chA.list())+len(chB.list()) < total || pendingOf(t, stA, conv) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: A sent %q, B sent %q", what, chA.list(), chB.list())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	chB.hold(true)
	queue(stA, obA, 10)
	waitSent("B holds, A queued", 10)
	if len(chA.list()) != 0 {
		t.Fatalf("A, without the connection, sent %q", chA.list())
	}

	// The connection moves to A.
	chB.hold(false)
	chA.hold(true)
	queue(stB, obB, 5)
	waitSent("A holds, B queued", 15)

	// Nobody holds it (a failover in progress): nothing is sent.
	chA.hold(false)
	queue(stA, obA, 3)
	queue(stB, obB, 2)
	time.Sleep(200 * time.Millisecond)
	if got := len(chA.list()) + len(chB.list()); got != 15 {
		t.Fatalf("sent %d while no instance held the connection", got)
	}
	// B connects: what waited goes out.
	chB.hold(true)
	waitSent("B connected again", 20)

	var all []string
	all = append(all, chB.list()[:10]...)
	all = append(all, chA.list()...)
	all = append(all, chB.list()[10:]...)
	for i, s := range all {
		if want := fmt.Sprintf("m%02d", i+1); s != want {
			t.Fatalf("delivered %q; want m01..m20 once each, in order", all)
		}
	}
}

func pendingOf(t *testing.T, st *store.Store, conv core.ConversationID) bool {
	t.Helper()
	ok, err := st.HasPendingOutbox(context.Background(), conv)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// pausable is this instance's view of the cluster, with a heartbeat that
// can lapse (a pause past the TTL) and come back under a new generation.
type pausable struct {
	mu  sync.Mutex
	gen uint64
	ok  bool
}

func (*pausable) Solo() bool { return false }
func (p *pausable) Fresh() (uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen, p.ok
}
func (p *pausable) set(gen uint64, ok bool) { p.mu.Lock(); p.gen, p.ok = gen, ok; p.mu.Unlock() }

// pausedInWait is a channel whose sends wait for the platform's rate
// limit, as the adapters' do (kit.Limiter), and this process is paused in
// that wait: its heartbeat lapses before the wait ends. The limiter's last
// step, the send check, decides whether the send goes out.
type pausedInWait struct {
	recorder
	cluster *pausable
	refused chan struct{}
}

func (p *pausedInWait) Send(ctx context.Context, m core.OutMessage) (core.MessageRef, error) {
	if gen, ok := p.cluster.Fresh(); ok && gen == 0 {
		p.cluster.set(0, false) // paused while waiting its turn
	}
	if err := core.CheckSend(ctx); err != nil {
		select {
		case p.refused <- struct{}{}:
		default:
		}
		return "", err
	}
	return p.recorder.Send(ctx, m)
}

// TestLaneSendsNothingAfterALapse: the lane is cleared to deliver (fresh
// heartbeat, claim made), then the process is paused in the adapter's
// rate-limit wait past its heartbeat. Waking, it must not send with the
// claim it made before: the job stays pending, not failed and not counted
// as an attempt, and is delivered once after the heartbeat came back and
// the lane claimed the conversation again. Without the send check the
// message went out at once with the stale claim.
func TestLaneSendsNothingAfterALapse(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dsn := storetest.NewDatabase(t)
	st, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.SetInstance("instance-a")
	if err := st.RegisterInstance(ctx, "host", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	const conv core.ConversationID = "test:paused"
	m := core.OutMessage{Conversation: conv, Text: "reply"}
	if err := st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		return nil, tx.QueueMessageThen("test", core.OpSend, "k-paused", m, func(int64) {})
	}); err != nil {
		t.Fatal(err)
	}
	cl := &pausable{ok: true}
	ch := &pausedInWait{cluster: cl, refused: make(chan struct{}, 1)}
	ob := New(Config{Store: st, Channels: map[core.ChannelName]core.Channel{"test": ch}, Cluster: cl,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now, MaxBackoff: time.Minute})
	done := make(chan struct{})
	go func() { defer close(done); ob.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-ch.refused:
	case <-time.After(10 * time.Second):
		t.Fatalf("the send was not refused; sent %q", ch.list())
	}
	if got := ch.list(); len(got) != 0 {
		t.Fatalf("sent %q with the claim made before the lapse", got)
	}
	row := func() string {
		return dbString(t, st, `SELECT status || ' attempts=' || attempts FROM outbox WHERE message_key = 'k-paused'`)
	}
	if r := row(); r != "pending attempts=0" {
		t.Fatalf("after the refused send the job is %s, want pending attempts=0", r)
	}
	// The heartbeat comes back under a new generation: the lane claims
	// again and delivers, once.
	cl.set(1, true)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.HasPrefix(row(), "delivered") {
		if time.Now().After(deadline) {
			t.Fatalf("the job is %s; sent %q", row(), ch.list())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := ch.list(); len(got) != 1 {
		t.Fatalf("sent %q, want the reply once", got)
	}
}

func dbString(t *testing.T, st *store.Store, q string) string {
	t.Helper()
	var s string
	if err := st.Pool().QueryRow(context.Background(), q).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// pacedRecorder is a channel whose platform allows one message per pace
// in a conversation (core.Paced); it records when each message arrived.
type pacedRecorder struct {
	recorder
	pace time.Duration
	mu   sync.Mutex
	at   []time.Time
}

func (p *pacedRecorder) ConversationPace() time.Duration { return p.pace }
func (p *pacedRecorder) Send(ctx context.Context, m core.OutMessage) (core.MessageRef, error) {
	p.mu.Lock()
	p.at = append(p.at, time.Now())
	p.mu.Unlock()
	return p.recorder.Send(ctx, m)
}

// pacedAdapter is one instance's adapter to the paced platform: like the
// real adapters' limiter (adapters/kit), it spaces its own sends to the
// conversation by the pace, and knows nothing of another instance's.
type pacedAdapter struct {
	*pacedRecorder
	mu   sync.Mutex
	last time.Time
}

func (a *pacedAdapter) Send(ctx context.Context, m core.OutMessage) (core.MessageRef, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if wait := a.pace - time.Since(a.last); !a.last.IsZero() && wait > 0 {
		time.Sleep(wait)
	}
	a.last = time.Now()
	return a.pacedRecorder.Send(ctx, m)
}

// TestLaneHandOverKeepsThePace: two live instances on one database, one
// chat whose platform allows a message per pace. A delivers a reply and
// its lane drains and gives the conversation up; B's worker then queues
// the next reply there. B must not send it until the pace has passed
// since A's lane let go (A may have sent just before, and A's rate limiter
// is not B's) — and must send it then, not leave it stranded. Checked to
// fail without the released lane's pace (store.ClaimLane): B sent a few
// milliseconds after A. (Each instance's adapter paces its own sends, as
// the real ones do, so the test holds whichever instance delivers which.)
func TestLaneHandOverKeepsThePace(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stA, stB := twoInstances(ctx, t)
	// One platform, seen through each instance's adapter.
	const pace = 400 * time.Millisecond
	chat := &pacedRecorder{pace: pace}
	var obs []*Outbox
	var wg sync.WaitGroup
	for _, st := range []*store.Store{stA, stB} {
		ob := New(Config{Store: st, Channels: map[core.ChannelName]core.Channel{"test": &pacedAdapter{pacedRecorder: chat}}, Cluster: withOthers{},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now})
		obs = append(obs, ob)
		wg.Add(1)
		go func() { defer wg.Done(); ob.Run(ctx) }()
	}
	defer func() { cancel(); wg.Wait() }()

	const conv core.ConversationID = "test:paced"
	queue := func(st *store.Store, ob *Outbox, text string) {
		m := core.OutMessage{Conversation: conv, Text: text}
		if err := st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			return nil, tx.QueueMessageThen("test", core.OpSend, "k-"+text, m, func(int64) {})
		}); err != nil {
			t.Fatal(err)
		}
		ob.Kick(conv, 1)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s; sent %q", what, chat.list())
			}
			time.Sleep(time.Millisecond)
		}
	}
	queue(stA, obs[0], "first")
	// Usually A delivers it, but B's recovery scan may find it pending
	// first and claim the conversation: whichever did, the other queues
	// the second reply (either may deliver it; the platform must see the
	// pace between the two).
	var released string
	waitFor("the first reply's lane was not given up", func() bool {
		released = dbString(t, stA, `SELECT COALESCE((SELECT instance FROM outbox_lanes WHERE conversation = 'test:paced' AND released_at IS NOT NULL), '')`)
		return released != ""
	})
	st, ob := stB, obs[1]
	if released == "instance-b" {
		st, ob = stA, obs[0]
	}
	queue(st, ob, "second")
	waitFor("the second reply was not delivered", func() bool { return len(chat.list()) == 2 && !pendingOf(t, st, conv) })
	if got := chat.list(); got[0] != "first" || got[1] != "second" {
		t.Fatalf("sent %q, want [first second]", got)
	}
	chat.mu.Lock()
	gap := chat.at[1].Sub(chat.at[0])
	chat.mu.Unlock()
	if gap < pace {
		t.Fatalf("the second reply came %s after the first, within the chat's pace (%s)", gap, pace)
	}
}
