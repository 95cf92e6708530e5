package whatsapp

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.mau.fi/whatsmeow/types/events"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/lease"
	"github.com/silas-gateway/silas/core/lease/leasetest"
	silasstore "github.com/silas-gateway/silas/core/store"
)

var _ lease.StateStore = (*silasstore.Store)(nil)

// device is WhatsApp's side of one linked device: one connection at a
// time; a second connection with the same keys replaces the first, which
// gets StreamReplaced (as WhatsApp does).
type device struct {
	mu       sync.Mutex
	current  *deviceClient
	replaced int
}

// deviceClient is one process's whatsmeow client of the device.
type deviceClient struct {
	*fakeWA
	dev *device
}

func (c *deviceClient) Connect(ctx context.Context) error {
	c.dev.mu.Lock()
	old := c.dev.current
	c.dev.current = c
	if old != nil && old != c && old.IsConnected() {
		c.dev.replaced++
	}
	c.dev.mu.Unlock()
	if old != nil && old != c && old.IsConnected() {
		old.fakeWA.Disconnect()
		old.emit(&events.StreamReplaced{})
	}
	return c.fakeWA.Connect(ctx)
}

func (d *device) connected() *deviceClient {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.current == nil || !d.current.IsConnected() {
		return nil
	}
	return d.current
}

func (f *fakeWA) connectCount() int { f.mu.Lock(); defer f.mu.Unlock(); return f.connects }

// Two instances on one database and one linked device: only the lease's
// holder connects; cut off from the database past its lease it
// disconnects, the other takes over and receives; what reaches the stale
// one is not acknowledged, its link-state writes are refused, and the
// StreamReplaced it may get is not reported as a problem.
func TestDeviceUnderTheLeaseHasOneHolder(t *testing.T) {
	t.Parallel()
	st := leasetest.Store(t)
	dev := &device{}
	const ttl = time.Second
	var mu sync.Mutex
	var told []string
	start := func(ls lease.StateStore, id string) (*Adapter, *deviceClient, *recInbox) {
		c := &deviceClient{fakeWA: newFakeWA(t), dev: dev}
		a, err := New(Config{Client: c, State: st, Leases: ls, LeaseTTL: ttl, Instance: id, Limits: limitsFast,
			Logger: slog.New(slog.DiscardHandler), ReconnectMin: time.Millisecond, ReconnectMax: 10 * time.Millisecond,
			Notify: func(_ context.Context, s string) { mu.Lock(); told = append(told, s); mu.Unlock() }})
		if err != nil {
			t.Fatal(err)
		}
		in := &recInbox{}
		leasetest.Run(t, a, in)
		return a, c, in
	}
	pa := &leasetest.CutOff{StateStore: st}
	a, ca, inA := start(pa, "A")
	eventually(t, "A connected", func() bool { return dev.connected() == ca })
	if !ca.emit(textEvent("W1", owner, owner, "one", nil)) || len(inA.all()) != 1 {
		t.Fatal("the holder did not store and acknowledge a message")
	}

	_, cb, inB := start(st, "B")
	time.Sleep(2 * ttl) // B tries for the lease every TTL/5 meanwhile
	if cb.connectCount() != 0 || dev.replaced != 0 {
		t.Fatalf("a second instance connected while the first held the lease (%d connects, %d replaced)", cb.connectCount(), dev.replaced)
	}

	// A is cut off from the database past its lease: B takes over.
	pa.Cut.Store(true)
	leasetest.Wait(t, "B connected", func() bool { return dev.connected() == cb })
	if !cb.emit(textEvent("W2", owner, owner, "two", nil)) || len(inB.all()) != 1 {
		t.Fatal("the new holder did not store and acknowledge a message")
	}

	// The stale instance: a late message on its old connection is not
	// acknowledged (WhatsApp gives it to the holder), a StreamReplaced is
	// not a problem to report, and its fenced write is refused.
	if ca.emit(textEvent("W3", owner, owner, "late", nil)) || len(inA.all()) != 1 {
		t.Fatalf("the stale instance acknowledged or stored a message: %+v", inA.all())
	}
	ca.emit(&events.StreamReplaced{})
	if err := a.setState(t.Context(), "problem", "stale"); !errors.Is(err, core.ErrFenced) {
		t.Fatalf("the stale instance's write: %v", err)
	}
	if p, _, _ := st.GetState(t.Context(), "whatsapp", "problem"); p != "" {
		t.Fatalf("problem recorded: %q", p)
	}
	mu.Lock()
	if len(told) != 0 {
		t.Errorf("the owner was told: %q", told)
	}
	mu.Unlock()

	// Healed, A waits for the lease instead of replacing B's stream.
	pa.Cut.Store(false)
	time.Sleep(2 * ttl)
	if ca.connectCount() != 1 || dev.connected() != cb {
		t.Fatalf("after A healed: A connected %d times, current is B: %v", ca.connectCount(), dev.connected() == cb)
	}
}
