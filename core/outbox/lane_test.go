package outbox

import (
	"context"
	"io"
	"log/slog"
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
				var jobs []core.OutboxJob
				for _, id := range b {
					jobs = append(jobs, core.OutboxJob{ID: id})
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

// TestLaneReadsUnderItsClaim: instance B's lane reads a conversation's
// oldest job while instance A holds the lane; before B claims, A delivers
// that job and the next and gives the lane up. B, claiming the free lane,
// must not send the job it read before its claim (already delivered, and
// a newer reply after it): it reads again under the claim and finds
// nothing. Without that read the chat saw first, second, first.
func TestLaneReadsUnderItsClaim(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
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
	a, b := open("instance-a"), open("instance-b")
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
	if ok, err := a.ClaimLane(ctx, conv); err != nil || !ok {
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
