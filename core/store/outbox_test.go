package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

// TestEnqueueThenIDsInOrder: jobs enqueued by several ops of one batch get
// ascending ids in the order they were queued (delivery order), and each
// caller gets its own job's id.
func TestEnqueueThenIDsInOrder(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	ids := make([]int64, 10)
	mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		for i := range ids {
			m := core.OutMessage{Conversation: "x:chat", Text: fmt.Sprintf("m%d", i)}
			if err := tx.QueueMessageThen("x", core.OpSend, fmt.Sprintf("k%d", i), m, func(id int64) { ids[i] = id }); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
	for i, id := range ids {
		var key, text string
		if err := s.Pool().QueryRow(ctx, `SELECT message_key, payload->>'text' FROM outbox WHERE id = $1`, id).Scan(&key, &text); err != nil {
			t.Fatalf("job %d (id %d): %v", i, id, err)
		}
		if key != fmt.Sprintf("k%d", i) || text != fmt.Sprintf("m%d", i) {
			t.Errorf("id %d belongs to %s, want k%d", id, key, i)
		}
		if i > 0 && id <= ids[i-1] {
			t.Errorf("ids not ascending in queue order: %v", ids)
		}
	}
}

func TestOutboxHeads(t *testing.T) {
	t.Parallel()
	base := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := &fakeClock{t: base}
	s, ctx, _ := setupDSN(t, Options{Now: clock.Now})

	// Jobs in id order: a1 b1 a2 c1 b2 a3.
	for _, key := range []string{"a1", "b1", "a2", "c1", "b2", "a3"} {
		conv := core.ConversationID("webchat:" + key[:1])
		mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			return nil, tx.QueueMessage("webchat", core.OpSend, key, core.OutMessage{Conversation: conv, Text: "text " + key})
		})
	}
	job := func(key string) core.OutboxJob {
		t.Helper()
		var j core.OutboxJob
		if err := s.Pool().QueryRow(ctx, `SELECT id, channel, conversation, message_key FROM outbox WHERE message_key = $1`, key).
			Scan(&j.ID, &j.Channel, &j.Conversation, &j.MessageKey); err != nil {
			t.Fatal(err)
		}
		return j
	}
	txOp := func(f func(ctx context.Context, tx *Tx) error) func() {
		return func() {
			mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) { return nil, f(ctx, tx) })
		}
	}

	steps := []struct {
		name   string
		action func()
		now    time.Time
		limit  int
		want   []string
	}{
		{"one head per conversation, oldest first", nil, base, 10, []string{"a1", "b1", "c1"}},
		{"limit", nil, base, 2, []string{"a1", "b1"}},
		{"nothing due yet", nil, base.Add(-time.Second), 10, nil},
		{"a head waiting for a retry blocks its conversation",
			txOp(func(ctx context.Context, tx *Tx) error {
				return tx.OutboxRetry(ctx, job("a1").ID, base.Add(time.Minute), "rate limited")
			}),
			base, 10, []string{"b1", "c1"}},
		{"the retry falls due", nil, base.Add(time.Minute), 10, []string{"a1", "b1", "c1"}},
		{"delivered head: the next job is the head",
			txOp(func(ctx context.Context, tx *Tx) error {
				// Only cards are edited later, so only a card's ref is kept.
				j := job("b1")
				j.Message.Card = &cards.Card{ID: "b1", Kind: cards.KindInfo, Intent: "x", Status: cards.StatusDone}
				tx.QueueDelivered(j, "ref-b1", core.OutboxDelivered)
				return nil
			}),
			base.Add(time.Minute), 10, []string{"a1", "c1", "b2"}}, // ordered by job id: c1 was queued before b2
		{"failed head: the conversation is empty",
			txOp(func(ctx context.Context, tx *Tx) error { return tx.OutboxFailed(ctx, job("c1").ID, "permanent") }),
			base.Add(time.Minute), 10, []string{"a1", "b2"}},
		{"superseded head",
			txOp(func(ctx context.Context, tx *Tx) error {
				tx.QueueDelivered(job("a1"), "", core.OutboxSuperseded)
				return nil
			}),
			base.Add(time.Minute), 10, []string{"a2", "b2"}},
	}
	for _, st := range steps {
		if st.action != nil {
			st.action()
		}
		heads, err := outboxHeads(ctx, s, st.now, st.limit)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		var got []string
		for _, h := range heads {
			got = append(got, h.MessageKey)
			if h.Message.Text != "text "+h.MessageKey || h.Message.Conversation != h.Conversation || h.Op != core.OpSend || h.Channel != "webchat" {
				t.Errorf("%s: job %s decoded as %+v", st.name, h.MessageKey, h)
			}
		}
		if !slices.Equal(got, st.want) {
			t.Errorf("%s: heads %v, want %v", st.name, got, st.want)
		}
	}

	heads, err := outboxHeads(ctx, s, base.Add(time.Hour), 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range heads {
		if h.MessageKey == "a2" && (h.Attempts != 0 || !h.NextAt.Equal(base)) {
			t.Errorf("a2: attempts %d next %v", h.Attempts, h.NextAt)
		}
	}
	if a1 := queryInt(t, ctx, s, `SELECT attempts FROM outbox WHERE message_key = 'a1'`); a1 != 2 {
		t.Errorf("a1: %d attempts, want 2 (retry, then superseded)", a1)
	}
	var ref string
	if err := s.pool.QueryRow(ctx, `SELECT ref FROM sent_messages WHERE channel = 'webchat' AND message_key = 'b1'`).Scan(&ref); err != nil || ref != "ref-b1" {
		t.Errorf("sent ref of b1 = %q, %v", ref, err)
	}
	if n := queryInt(t, ctx, s, `SELECT count(*) FROM sent_messages WHERE message_key = 'a1'`); n != 0 {
		t.Errorf("a superseded job recorded a sent ref")
	}
}

// outboxHeads is what the engine's delivery lanes see together: each
// conversation's next pending job (NextOutboxJob), if due, oldest first.
func outboxHeads(ctx context.Context, s *Store, now time.Time, limit int) ([]core.OutboxJob, error) {
	convs, err := s.PendingOutboxConversations(ctx, 1000)
	if err != nil {
		return nil, err
	}
	var out []core.OutboxJob
	for _, c := range convs {
		j, _, _, err := s.NextOutboxJob(ctx, c)
		if err != nil {
			return nil, err
		}
		if !j.NextAt.After(now) {
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b core.OutboxJob) int { return int(a.ID - b.ID) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// TestQueuedAsRead: a job handed over by the transaction that queued it
// (QueueMessageHanded, QueueTapAnswerHanded) is the job NextOutboxJob
// reads back — the same fields, the answer with its card, text as stored
// (a run's output that is not UTF-8, or holds NUL), the ref of the card's
// message as the insert read it — and its ref stops being current
// once a delivery that may have recorded another ref for that message
// ended (RefRecorded), not for one that records none or another message's.
func TestQueuedAsRead(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	const conv core.ConversationID = "test:handed"
	card := &cards.Card{ID: "c-handed", Kind: cards.KindApproval, Intent: "Run uname", Risk: cards.RiskLow, Status: cards.StatusPending}
	mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		return nil, tx.QueueMessage("test", core.OpSend, string(card.ID), core.OutMessage{Conversation: conv, Card: card})
	})
	sent, _, _, err := s.NextOutboxJob(ctx, conv)
	if err != nil {
		t.Fatal(err)
	}
	mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		tx.QueueDelivered(sent, "ref-1", core.OutboxDelivered)
		return nil, nil
	})
	running, done := *card, *card
	running.Status, done.Status = cards.StatusRunning, cards.StatusDone
	// Stored with U+FFFD for the NUL and the byte that is not UTF-8.
	running.Output, done.Output = "a\x00b\xffc", "a\x00b\xffc"
	var handed []Queued
	mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		handed = nil
		got := func(q Queued) { handed = append(handed, q) }
		if err := tx.QueueTapAnswerHanded("test", string(card.ID), core.TapAnswer{Conversation: conv, EventID: "e1", Sender: "test:owner",
			Tap: core.Tap{Card: card.ID, Choice: "approve"}, Handle: "h1", Card: &running, Ref: "not stored", CardText: "not stored"}, got); err != nil {
			return nil, err
		}
		return nil, tx.QueueMessageHanded("test", core.OpUpdate, string(card.ID), core.OutMessage{Conversation: conv, Card: &done, CardText: "not stored"}, got)
	})
	if len(handed) != 2 {
		t.Fatalf("%d jobs handed over, want 2", len(handed))
	}
	var skip []int64
	for i, q := range handed {
		j, _, ref, err := s.NextOutboxJob(ctx, conv, skip...)
		if err != nil {
			t.Fatal(err)
		}
		skip = append(skip, j.ID)
		if !sameJob(q.OutboxJob, j) || q.Ref != ref || q.Ref != "ref-1" {
			t.Errorf("job %d handed over as %s (ref %q), read back as %s (ref %q)", i, jobString(q.OutboxJob), q.Ref, jobString(j), ref)
		}
		if !q.RefCurrent() {
			t.Errorf("job %d: its ref is not current before any delivery", i)
		}
	}
	RefRecorded(sent, "") // nothing sent as a new message
	RefRecorded(core.OutboxJob{Channel: "test", MessageKey: "c-handed", Message: core.OutMessage{Text: "not a card"}}, "ref-x")
	if !handed[0].RefCurrent() {
		t.Fatal("a delivery that records no ref for the card made the handed edit's ref stale")
	}
	RefRecorded(sent, "ref-2")
	if handed[0].RefCurrent() || handed[1].RefCurrent() {
		t.Fatal("the card's ref may have changed, yet the handed edits' refs are current")
	}
}

// sameJob compares two jobs as the lane uses them: their fields, the
// message and answer as stored (JSON), the times to the database's
// microsecond.
func sameJob(a, b core.OutboxJob) bool {
	return jobString(a) == jobString(b) && a.NextAt.Truncate(time.Microsecond).Equal(b.NextAt) && a.CreatedAt.Truncate(time.Microsecond).Equal(b.CreatedAt)
}

func jobString(j core.OutboxJob) string {
	m, _ := json.Marshal(j.Message)
	a, _ := json.Marshal(j.Answer)
	var ref, cardText string
	if j.Answer != nil {
		ref, cardText = string(j.Answer.Ref), j.Answer.CardText
		if j.Answer.Card != j.Message.Card {
			ref += " (the answer's card is not the message's)"
		}
	}
	return fmt.Sprintf("{id %d %s %s %s key %s attempts %d message %s card text %q answer %s ref %q card text %q}", j.ID, j.Channel, j.Conversation, j.Op,
		j.MessageKey, j.Attempts, m, j.Message.CardText, a, ref, cardText)
}

// TestHandedRefsReadWithInsert: the platform ref of each handed edit's
// message is read by the outbox INSERT itself (no statement of its own),
// up to handedRefsMax of them; with more, each is read apart. Either way
// each handed edit gets its own message's ref ("" for a card never
// delivered), as NextOutboxJob reads it.
func TestHandedRefsReadWithInsert(t *testing.T) {
	t.Parallel()
	rt := &roundTrips{}
	s, ctx, _ := setupDSN(t, Options{QueryTracer: rt})
	const conv core.ConversationID = "test:refs"
	card := func(i int) *cards.Card {
		return &cards.Card{ID: cards.ID(fmt.Sprintf("c-refs-%d", i)), Kind: cards.KindApproval, Intent: "Run uname", Risk: cards.RiskLow, Status: cards.StatusPending}
	}
	const delivered = handedRefsMax + 2 // card handedRefsMax+2 is never delivered
	for i := range delivered {
		mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			return nil, tx.QueueMessage("test", core.OpSend, string(card(i).ID), core.OutMessage{Conversation: conv, Card: card(i)})
		})
		sent, _, _, err := s.NextOutboxJob(ctx, conv)
		if err != nil {
			t.Fatal(err)
		}
		mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			tx.QueueDelivered(sent, core.MessageRef(fmt.Sprintf("ref-%d", i)), core.OutboxDelivered)
			return nil, nil
		})
	}
	var skip []int64
	edit := func(name string, which []int, wantApart bool) {
		t.Helper()
		var handed []Queued
		n := rt.count()
		mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			handed = nil
			for _, i := range which {
				c := *card(i)
				c.Status = cards.StatusRunning
				if err := tx.QueueMessageHanded("test", core.OpUpdate, string(c.ID), core.OutMessage{Conversation: conv, Card: &c},
					func(q Queued) { handed = append(handed, q) }); err != nil {
					return nil, err
				}
			}
			return nil, tx.QueueMessage("test", core.OpSend, "plain", core.OutMessage{Conversation: conv, Text: "not handed"})
		})
		trips, _ := rt.since(n)
		apart := false
		for _, trip := range trips {
			for _, q := range trip {
				apart = apart || strings.HasPrefix(q, "SELECT ref FROM sent_messages")
			}
		}
		if apart != wantApart {
			t.Errorf("%s: refs read by statements of their own: %v, want %v (%q)", name, apart, wantApart, trips)
		}
		if len(handed) != len(which) {
			t.Fatalf("%s: %d jobs handed over, want %d", name, len(handed), len(which))
		}
		for k, q := range handed {
			want := core.MessageRef("")
			if which[k] < delivered {
				want = core.MessageRef(fmt.Sprintf("ref-%d", which[k]))
			}
			j, _, ref, err := s.NextOutboxJob(ctx, conv, skip...)
			if err != nil {
				t.Fatal(err)
			}
			skip = append(skip, j.ID)
			if j.ID != q.ID || q.Ref != ref || q.Ref != want {
				t.Errorf("%s: edit of card %d handed over as job %d with ref %q; read back job %d with ref %q; want ref %q", name, which[k], q.ID, q.Ref, j.ID, ref, want)
			}
		}
		plain, _, _, err := s.NextOutboxJob(ctx, conv, skip...)
		if err != nil {
			t.Fatal(err)
		}
		skip = append(skip, plain.ID)
	}
	edit("two edits", []int{1, delivered}, false)
	edit("one edit", []int{0}, false)
	all := make([]int, 0, delivered+1)
	for i := range delivered + 1 {
		all = append(all, delivered-i) // not in key order
	}
	edit("more than handedRefsMax", all, true)
}

// TestSingleRowInsertsUnsorted: a turn or an outbox job inserted alone
// goes without ORDER BY (and a card edit's fan-out with it), a Sort node
// PostgreSQL would run for one row; several keep it, so ids and seqs still
// ascend in queue order (TestEnqueueThenIDsInOrder) and a card's routed
// copies in the order of their edits.
func TestSingleRowInsertsUnsorted(t *testing.T) {
	t.Parallel()
	rt := &roundTrips{}
	s, ctx, _ := setupDSN(t, Options{QueryTracer: rt})
	const conv core.ConversationID = "test:sorts"
	card := &cards.Card{ID: "c-sorts", Kind: cards.KindApproval, Intent: "Run uname", Risk: cards.RiskLow, Status: cards.StatusRunning}
	inserts := func(name string, n int) (turns, jobs []string) {
		t.Helper()
		from := rt.count()
		mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			for i := range n {
				if err := tx.QueueTurn(testTurn("test", fmt.Sprintf("%s-%d", name, i)), "pending", func(int64, bool) {}); err != nil {
					return nil, err
				}
				if err := tx.QueueMessage("test", core.OpUpdate, string(card.ID), core.OutMessage{Conversation: conv, Card: card}); err != nil {
					return nil, err
				}
			}
			return nil, nil
		})
		trips, _ := rt.since(from)
		for _, trip := range trips {
			for _, q := range trip {
				switch {
				case strings.Contains(q, "INSERT INTO turns"):
					turns = append(turns, q)
				case strings.Contains(q, "INSERT INTO outbox"):
					jobs = append(jobs, q)
				}
			}
		}
		if len(turns) != 1 || len(jobs) != 1 {
			t.Fatalf("%s: %d turn and %d outbox statements, want 1 each", name, len(turns), len(jobs))
		}
		return turns, jobs
	}
	turns, jobs := inserts("one", 1)
	if strings.Contains(turns[0], "ORDER BY") || strings.Contains(jobs[0], "ORDER BY") {
		t.Errorf("a single turn and a single card edit are sorted:\n%s\n%s", turns[0], jobs[0])
	}
	turns, jobs = inserts("two", 2)
	if !strings.Contains(turns[0], "ORDER BY n") || strings.Count(jobs[0], "ORDER BY") != 2 {
		t.Errorf("two turns and two card edits are not inserted in queue order:\n%s\n%s", turns[0], jobs[0])
	}
}
