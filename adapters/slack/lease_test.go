package slack

import (
	"log/slog"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/slack/slacktest"
	"github.com/silas-gateway/silas/core/lease"
	"github.com/silas-gateway/silas/core/lease/leasetest"
	"github.com/silas-gateway/silas/core/store"
)

var _ lease.StateStore = (*store.Store)(nil)

// Two instances on one database and one Slack app (the fake): only the
// lease's holder opens a Socket Mode connection — never two sockets at
// once, which would split the events between them; cut off from the
// database past its lease, the holder closes its socket and the other
// opens one and receives, including what the first had not acknowledged.
func TestSocketUnderTheLeaseHasOneHolder(t *testing.T) {
	t.Parallel()
	st := leasetest.Store(t)
	srv := slacktest.NewServer(t, slacktest.Options{PerChannelInterval: time.Millisecond})
	const ttl = time.Second
	start := func(ls lease.Store, id string) *leasetest.Inbox {
		a, err := New(Config{BotToken: slacktest.BotToken, AppToken: slacktest.AppToken, BaseURL: srv.URL, State: st,
			Leases: ls, LeaseTTL: ttl, Instance: id, Logger: slog.New(slog.DiscardHandler), HTTPTimeout: 5 * time.Second,
			PingInterval: time.Second, PingTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		in := &leasetest.Inbox{}
		leasetest.Run(t, a, in)
		return in
	}
	const dm = "D0OWNER"
	pa := &leasetest.CutOff{StateStore: st}
	inA := start(pa, "A")
	leasetest.Wait(t, "A's socket", func() bool { return srv.Live() == 1 })
	first := srv.Send(slacktest.Msg{Channel: dm, User: "U0OWNER", Text: "one"})
	leasetest.Wait(t, "A delivers the first message", func() bool { return inA.Has(first) })

	inB := start(st, "B")
	time.Sleep(2 * ttl) // B tries for the lease every TTL/5 meanwhile
	if srv.Opens() != 1 || srv.MaxLive() != 1 {
		t.Fatalf("a second instance opened a socket while the first held the lease: %d opens, %d at once", srv.Opens(), srv.MaxLive())
	}

	// A is cut off from the database past its lease: B takes over.
	pa.Cut.Store(true)
	leasetest.Wait(t, "B's socket", func() bool { return srv.Opens() == 2 && srv.Live() == 1 })
	second := srv.Send(slacktest.Msg{Channel: dm, User: "U0OWNER", Text: "two"})
	leasetest.Wait(t, "B delivers the second message", func() bool { return inB.Has(second) })
	if inA.Has(second) || inB.Has(first) {
		t.Fatal("a message was delivered by the instance that did not hold the lease, or twice")
	}

	// Healed, A waits for the lease instead of opening a second socket.
	pa.Cut.Store(false)
	time.Sleep(2 * ttl)
	if srv.Opens() != 2 || srv.MaxLive() != 1 || len(srv.Violations()) != 0 {
		t.Fatalf("after A healed: %d opens, %d at once, violations %q", srv.Opens(), srv.MaxLive(), srv.Violations())
	}
	ls, err := st.Leases(t.Context())
	if err != nil || len(ls) != 1 || ls[0].Name != "slack/slack" || ls[0].Holder != "B" || ls[0].Previous != "" {
		t.Fatalf("leases %+v, %v", ls, err)
	}
}
