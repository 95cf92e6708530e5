package telegram

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/telegram/telegramtest"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/storetest"
)

var _ LeaseStore = (*store.Store)(nil)

// Two instances on one database and one bot: only the lease's holder
// polls (the other never calls getUpdates, so Telegram sees no conflict);
// when the holder stops, the other takes over with a newer epoch and goes
// on from the offset the first stored.
func TestPollingUnderTheLeaseHasOneConsumer(t *testing.T) {
	st, err := store.Open(t.Context(), storetest.NewDatabase(t), store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	lease := func(c *Config) { c.State, c.Leases, c.LeaseTTL = st, st, time.Second }
	a := setup(t, telegramtest.Options{}, lease)
	// The second instance: the same bot (fake) and database, its own
	// process (adapter, inbox, log).
	b := &bundle{srv: a.srv, in: newFakeInbox(), logs: &syncBuffer{}}
	b.cfg = a.cfg
	b.cfg.Logger = slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if b.a, err = New(b.cfg); err != nil {
		t.Fatal(err)
	}

	stopA := a.start(t)
	first := a.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "one"})
	a.waitTurn(t, first)
	b.start(t)
	second := a.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "two"})
	a.waitTurn(t, second)
	// B has tried for the lease meanwhile (its retries every TTL/5).
	time.Sleep(time.Second)
	if strings.Contains(b.logs.String(), "polling under the lease") || len(b.in.list()) != 0 {
		t.Fatalf("the second instance polled while the first held the lease:\n%s", b.logs.String())
	}
	if strings.Contains(a.logs.String(), "Conflict") {
		t.Fatalf("Telegram saw two consumers:\n%s", a.logs.String())
	}

	stopA() // releases the lease
	third := a.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "three"})
	b.waitTurn(t, third)
	if turns := b.in.list(); len(turns) != 1 {
		t.Fatalf("the new holder delivered %d turns, want only the one after the stored offset", len(turns))
	}
	ls, err := st.Leases(t.Context())
	if err != nil || len(ls) != 1 || ls[0].Holder != b.a.instance || ls[0].Epoch != 2 {
		t.Fatalf("leases %+v, %v", ls, err)
	}
	waitFor(t, "the new holder's offset", func() bool {
		v, _, _ := st.GetState(t.Context(), "telegram", stateOffset)
		return v == strconv.FormatInt(third, 10)
	})
}
