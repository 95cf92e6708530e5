package health_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/health"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// deafable is a channel whose liveness the test sets.
type deafable struct {
	name core.ChannelName
	mu   sync.Mutex
	h    core.ChannelHealth
}

func (d *deafable) Name() core.ChannelName                      { return d.name }
func (d *deafable) Run(ctx context.Context, _ core.Inbox) error { <-ctx.Done(); return nil }
func (d *deafable) Send(context.Context, core.OutMessage) (core.MessageRef, error) {
	return "", nil
}
func (d *deafable) Update(context.Context, core.MessageRef, core.OutMessage) error { return nil }
func (d *deafable) Health() core.ChannelHealth {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.h
}
func (d *deafable) set(h core.ChannelHealth) { d.mu.Lock(); d.h = h; d.mu.Unlock() }

type told struct {
	mu   sync.Mutex
	from []core.ChannelName
	text []string
}

func (t *told) notify(_ context.Context, from core.ChannelName, text string) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.from, t.text = append(t.from, from), append(t.text, text)
	return 1, nil
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func setup(t *testing.T, chans ...core.Channel) (*health.Monitor, *told, *clock, *store.Store) {
	t.Helper()
	clk := &clock{t: time.Now()}
	st, err := store.Open(context.Background(), storetest.NewDatabase(t), store.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	tl := &told{}
	m, err := health.New(health.Config{Store: st, Channels: chans, Notify: tl.notify, DeafAfter: time.Minute, Instance: "test", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return m, tl, clk, st
}

// TestDeafChannelToldOncePerIncident: a channel that hears nothing past the
// threshold while its connection stays open is reported once on the other
// channels, checked as often as it may be; hearing again is reported once.
func TestDeafChannelToldOncePerIncident(t *testing.T) {
	t.Parallel()
	slack := &deafable{name: "slack"}
	m, tl, clk, st := setup(t, slack)
	ctx := context.Background()
	slack.set(core.ChannelHealth{Connected: true, State: "socket open", LastEvent: clk.Now()})
	if err := m.Check(ctx); err != nil || len(tl.text) != 0 {
		t.Fatalf("a live channel was reported: %v %q", err, tl.text)
	}
	clk.add(2 * time.Minute)
	for range 3 {
		if err := m.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(tl.text) != 1 || tl.from[0] != "slack" || !strings.Contains(tl.text[0], "the slack channel has heard nothing") ||
		!strings.Contains(tl.text[0], "socket open") {
		t.Fatalf("told %q from %v; want one deaf notice from slack", tl.text, tl.from)
	}
	text, err := m.Text(ctx)
	if err != nil || !strings.Contains(text, "slack: DEAF since") {
		t.Fatalf("/status: %q, %v", text, err)
	}
	slack.set(core.ChannelHealth{Connected: true, State: "socket open", LastEvent: clk.Now()})
	for range 2 {
		if err := m.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(tl.text) != 2 || !strings.Contains(tl.text[1], "hears again") {
		t.Fatalf("told %q; want the recovery once", tl.text)
	}
	var kinds []string
	rows, _ := st.Pool().Query(ctx, `SELECT kind FROM audit_log WHERE kind LIKE 'channel.%' ORDER BY seq`)
	for rows.Next() {
		var k string
		_ = rows.Scan(&k)
		kinds = append(kinds, k)
	}
	if strings.Join(kinds, ",") != "channel.deaf,channel.recovered" {
		t.Fatalf("audit: %v", kinds)
	}
}

// TestStartedReportsUncleanStop: a start after a stop without a clean
// shutdown tells the owners when the gateway was down; one after a clean
// stop, or the first start, says nothing.
func TestStartedReportsUncleanStop(t *testing.T) {
	t.Parallel()
	m, tl, clk, _ := setup(t)
	ctx := context.Background()
	if text, err := m.Started(ctx); err != nil || text != "" {
		t.Fatalf("first start: %q, %v", text, err)
	}
	clk.add(10 * time.Minute) // killed: no clean stop, no beat since
	text, err := m.Started(ctx)
	if err != nil || !strings.Contains(text, "the gateway was down from about") || len(tl.text) != 1 || tl.from[0] != "" {
		t.Fatalf("after a kill: %q, %v; told %q", text, err, tl.text)
	}
	if err := m.Stopped(ctx); err != nil {
		t.Fatal(err)
	}
	clk.add(10 * time.Minute)
	if text, err := m.Started(ctx); err != nil || text != "" {
		t.Fatalf("after a clean stop: %q, %v", text, err)
	}
}

// TestCheckRecordsReports: each check records the channels' liveness
// (the state, the last sign of life, the probe) for doctor, which runs no
// adapter.
func TestCheckRecordsReports(t *testing.T) {
	t.Parallel()
	slack := &deafable{name: "slack"}
	m, _, clk, st := setup(t, slack)
	ctx := context.Background()
	slack.set(core.ChannelHealth{Connected: true, State: "socket open", LastEvent: clk.Now(), Probe: "Slack counts 2 connection(s)"})
	if err := m.Check(ctx); err != nil {
		t.Fatal(err)
	}
	reports, err := st.HealthReports(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := reports["slack"]
	if !ok || r.Instance != "test" || !r.Health.Connected || r.Health.State != "socket open" || r.Health.Probe != "Slack counts 2 connection(s)" ||
		r.Health.LastEvent.IsZero() {
		t.Fatalf("reports = %+v", reports)
	}
	slack.set(core.ChannelHealth{State: "reconnecting", LastEvent: clk.Now()})
	clk.add(time.Second)
	if err := m.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if reports, err = st.HealthReports(ctx); err != nil || reports["slack"].Health.Connected || reports["slack"].Health.State != "reconnecting" {
		t.Fatalf("after a reconnect: %+v, %v", reports, err)
	}
	// A process long gone left its rows; the check drops them, never a
	// live one's.
	if err := st.ReportHealth(ctx, "gone/1", "slack", core.ChannelHealth{State: "polling", LastEvent: clk.Now()}, clk.Now().Add(-48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := m.Check(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM channel_reports WHERE instance = 'gone/1'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a gone instance's rows = %d, %v", n, err)
	}
	if reports, err = st.HealthReports(ctx); err != nil || reports["slack"].Instance != "test" {
		t.Fatalf("the live report went too: %+v, %v", reports, err)
	}
}

// TestClusterJudgedByTheHolder: two instances on one database serve the
// same channel; the one that checks (River's leader) does not hold its
// connection — it held it once, so its own last sign of life is old —
// while the other holds it and records what it hears on its heartbeat
// (Record). The channel is judged by the holder's liveness: not deaf while
// the holder hears, deaf once it stops, told once. Checked to fail with
// the checking instance's own report judged.
func TestClusterJudgedByTheHolder(t *testing.T) {
	t.Parallel()
	leaderView := &deafable{name: "telegram"}
	leader, tl, clk, st := setup(t, leaderView)
	holderView := &deafable{name: "telegram"}
	holder, err := health.New(health.Config{Store: st, Channels: []core.Channel{holderView}, Notify: tl.notify, DeafAfter: time.Minute,
		Instance: "holder", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	leaderView.set(core.ChannelHealth{State: "not polling: another instance holds telegram/telegram", LastEvent: clk.Now()})
	clk.add(5 * time.Minute)
	holderView.set(core.ChannelHealth{Connected: true, State: "polling", LastEvent: clk.Now()})
	if err := holder.Record(ctx); err != nil {
		t.Fatal(err)
	}
	if err := leader.Check(ctx); err != nil || len(tl.text) != 0 {
		t.Fatalf("a channel its holder hears was reported: %v %q", err, tl.text)
	}
	text, err := leader.Text(ctx)
	if err != nil || !strings.Contains(text, "telegram: ok; polling") {
		t.Fatalf("/status on the instance without the connection: %q, %v", text, err)
	}
	clk.add(2 * time.Minute) // the holder hears nothing more
	if err := holder.Record(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := leader.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(tl.text) != 1 || !strings.Contains(tl.text[0], "the telegram channel has heard nothing") || !strings.Contains(tl.text[0], "polling") {
		t.Fatalf("told %q; want one deaf notice with the holder's state", tl.text)
	}
}

// turnAt stores a turn the platform timestamped at, pending or answered.
func turnAt(t *testing.T, st *store.Store, id string, at time.Time, answered bool) int64 {
	t.Helper()
	var seq int64
	err := st.Do(context.Background(), func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		var err error
		seq, _, err = tx.InsertTurn(ctx, core.Turn{Channel: "telegram", EventID: id, Conversation: "telegram:1", Sender: "telegram:1", Text: "hi", At: at})
		return nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if answered {
		answer(t, st, seq)
	}
	return seq
}

func answer(t *testing.T, st *store.Store, seq int64) {
	t.Helper()
	if _, err := st.Pool().Exec(context.Background(), `UPDATE turns SET status = 'done' WHERE seq = $1`, seq); err != nil {
		t.Fatal(err)
	}
}

func countKind(t *testing.T, st *store.Store, kind audit.Kind) int {
	t.Helper()
	var n int
	if err := st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM audit_log WHERE kind = $1`, kind).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// started is setup after a first start (a heartbeat), with when it beat.
func started(t *testing.T) (*health.Monitor, *told, *clock, *store.Store, time.Time) {
	t.Helper()
	m, tl, clk, st := setup(t)
	if _, err := m.Started(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m, tl, clk, st, clk.Now()
}

// TestCaughtUpAfterUncleanStop: after a restart the first notice reported,
// the check tells the owners once, on every channel, how many messages
// arrived while the gateway was down — those unanswered at the restart and
// those the platforms delivered afterwards timestamped inside the gap — and
// that all were answered; not before the catch-up had time to arrive, nor
// while some still wait and the bound has not passed; never twice, even
// from another instance's check.
func TestCaughtUpAfterUncleanStop(t *testing.T) {
	t.Parallel()
	m, tl, clk, st, t0 := started(t)
	ctx := context.Background()
	turnAt(t, st, "before-answered", t0.Add(-time.Minute), true)
	pendingAtStop := turnAt(t, st, "before-pending", t0.Add(time.Second), false)
	clk.add(10 * time.Minute) // killed: no clean stop, no beat since
	if text, err := m.Started(ctx); err != nil || !strings.Contains(text, "1 message(s) it had not answered") {
		t.Fatalf("first notice: %q, %v", text, err)
	}
	// The platforms' catch-up: two sent while down, one sent after.
	meanwhile1 := turnAt(t, st, "meanwhile-1", t0.Add(3*time.Minute), false)
	turnAt(t, st, "meanwhile-2", t0.Add(7*time.Minute), true)
	turnAt(t, st, "after", clk.Now().Add(time.Second), false)
	if err := m.Check(ctx); err != nil || len(tl.text) != 1 {
		t.Fatalf("followed up before the catch-up could arrive: %v %q", err, tl.text)
	}
	clk.add(time.Minute)
	if err := m.Check(ctx); err != nil || len(tl.text) != 1 {
		t.Fatalf("followed up while messages of the gap wait: %v %q", err, tl.text)
	}
	answer(t, st, pendingAtStop)
	answer(t, st, meanwhile1)
	other, err := health.New(health.Config{Store: st, Notify: tl.notify, Instance: "other", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	for _, mon := range []*health.Monitor{m, other, m} {
		if err := mon.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(tl.text) != 2 || tl.from[1] != "" ||
		!strings.Contains(tl.text[1], "while the gateway was down (from about "+t0.UTC().Format("2006-01-02 15:04:05 UTC")) ||
		!strings.Contains(tl.text[1], "3 message(s) arrived; all 3 were answered.") {
		t.Fatalf("told %q from %v; want one follow-up to every channel: 3 arrived, all answered", tl.text, tl.from)
	}
	if n := countKind(t, st, audit.KindGatewayCaughtUp); n != 1 {
		t.Fatalf("%d %s entries; want 1", n, audit.KindGatewayCaughtUp)
	}
}

// TestCaughtUpSaysWhatIsStillBeingAnswered: past the bound, the follow-up
// says how many of the gap's messages are still being answered.
func TestCaughtUpSaysWhatIsStillBeingAnswered(t *testing.T) {
	t.Parallel()
	m, tl, clk, st, t0 := started(t)
	ctx := context.Background()
	clk.add(10 * time.Minute)
	if _, err := m.Started(ctx); err != nil {
		t.Fatal(err)
	}
	turnAt(t, st, "meanwhile-1", t0.Add(time.Minute), true)
	turnAt(t, st, "meanwhile-2", t0.Add(2*time.Minute), false)
	clk.add(time.Minute)
	if err := m.Check(ctx); err != nil || len(tl.text) != 1 {
		t.Fatalf("followed up before the bound: %v %q", err, tl.text)
	}
	clk.add(2 * time.Minute)
	if err := m.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if len(tl.text) != 2 || !strings.Contains(tl.text[1], "2 message(s) arrived; 1 answered, 1 still being answered.") {
		t.Fatalf("told %q; want 2 arrived, 1 answered, 1 still being answered", tl.text)
	}
}
