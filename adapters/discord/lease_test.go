package discord

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/discord/discordtest"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/lease"
	"github.com/silas-gateway/silas/core/lease/leasetest"
	"github.com/silas-gateway/silas/core/store"
)

var _ lease.StateStore = (*store.Store)(nil)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// Two instances on one database and one bot (the fake Discord): only the
// holder of the gateway lease connects; when it is cut off past its lease
// it disconnects, the other takes over (a newer epoch, one more IDENTIFY)
// and receives; the cut-off one's stale writes are refused and, healed, it
// does not connect while the other holds the lease.
func TestGatewayUnderTheLeaseHasOneHolder(t *testing.T) {
	t.Parallel()
	st := leasetest.Store(t)
	srv := discordtest.NewServer(t)
	user := discordtest.User{ID: "1300000000000000001", Username: "olive"}
	dm := srv.DM(user.ID)
	const ttl = time.Second
	start := func(ls lease.StateStore, id string) (*Adapter, *leasetest.Inbox, *lockedBuf) {
		logs := &lockedBuf{}
		a, err := New(Config{Token: discordtest.Token, ApplicationID: discordtest.AppID, BaseURL: srv.BaseURL, State: st,
			Leases: ls, LeaseTTL: ttl, Instance: id, HTTPTimeout: 5 * time.Second, ReconnectMin: 50 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		if err != nil {
			t.Fatal(err)
		}
		in := &leasetest.Inbox{}
		leasetest.Run(t, a, in)
		return a, in, logs
	}

	pa := &leasetest.CutOff{StateStore: st}
	a, inA, logsA := start(pa, "A")
	leasetest.Wait(t, "A's gateway session", srv.Connected)
	first := srv.SendMessage(user, dm, "one", false)
	leasetest.Wait(t, "A delivers the first message", func() bool { return inA.Has("m" + first) })

	_, inB, logsB := start(st, "B")
	// B tries for the lease every TTL/5 meanwhile; A renews it.
	time.Sleep(2 * ttl)
	if g := srv.Gateway(); g.Identifies != 1 || g.Connects != 1 || strings.Contains(logsB.String(), "connecting under the gateway lease") {
		t.Fatalf("a second instance connected while the first held the lease: %+v\n%s", g, logsB.String())
	}

	// A loses the database past its lease: it disconnects; B takes over.
	epochA := a.convs.fence.Load().epoch
	pa.Cut.Store(true)
	leasetest.Wait(t, "B's gateway session", func() bool { return srv.Gateway().Identifies == 2 && srv.Connected() })
	second := srv.SendMessage(user, dm, "two", false)
	leasetest.Wait(t, "B delivers the second message", func() bool { return inB.Has("m" + second) })
	if inA.Has("m"+second) || inB.Has("m"+first) {
		t.Fatal("a message was delivered by the instance that did not hold the lease")
	}
	if !strings.Contains(logsA.String(), "lease lost") {
		t.Fatalf("A did not report losing the lease:\n%s", logsA.String())
	}
	ls, err := st.Leases(t.Context())
	if err != nil || len(ls) != 1 || ls[0].Name != "discord/discord" || ls[0].Holder != "B" || ls[0].Epoch != epochA+1 {
		t.Fatalf("leases %+v, %v", ls, err)
	}

	// A's writes under its old epoch are refused; B's cursor stands.
	if err := a.convs.advance(t.Context(), dm, "", user.ID, "9"+second, time.Now()); !errors.Is(err, core.ErrFenced) {
		t.Fatalf("the stale holder's cursor write: %v", err)
	}
	leasetest.Wait(t, "B's cursor", func() bool {
		v, _, _ := st.GetState(t.Context(), "discord", stateKey)
		return strings.Contains(v, `"last":"`+second+`"`)
	})

	// Healed, A waits for the lease instead of connecting again.
	pa.Cut.Store(false)
	time.Sleep(2 * ttl)
	if g := srv.Gateway(); g.Identifies != 2 || g.CleanCloses != 0 {
		t.Fatalf("after A healed: %+v", g)
	}
}
