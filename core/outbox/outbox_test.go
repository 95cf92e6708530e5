package outbox

import (
	"context"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

type recorder struct {
	mu   sync.Mutex
	sent []string
}

func (r *recorder) Name() core.ChannelName                      { return "test" }
func (r *recorder) Run(ctx context.Context, _ core.Inbox) error { <-ctx.Done(); return nil }
func (r *recorder) Update(context.Context, core.MessageRef, core.OutMessage) error {
	return nil
}
func (r *recorder) Send(_ context.Context, m core.OutMessage) (core.MessageRef, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, m.Text)
	return core.MessageRef(m.Text), nil
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.sent...)
}

// Workers resuming stored turns start before the outbox runs. A job they
// hand over then is known only to the database; a later job of the same
// conversation handed over once the outbox runs must not overtake it (the
// lane it starts would otherwise deliver the newer job from memory first).
func TestHandOffBeforeRunKeepsOrder(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := store.Open(ctx, storetest.NewDatabase(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec := &recorder{}
	ob := New(Config{Store: st, Channels: map[core.ChannelName]core.Channel{"test": rec},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now})
	const conv core.ConversationID = "test:chat"
	queue := func(text string) {
		t.Helper()
		var job core.OutboxJob
		err := st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			m := core.OutMessage{Conversation: conv, Text: text}
			job = core.OutboxJob{Channel: "test", Conversation: conv, Op: core.OpSend, MessageKey: "k-" + text, Message: m}
			return nil, tx.QueueMessageThen("test", core.OpSend, job.MessageKey, m, func(id int64) { job.ID = id })
		})
		if err != nil {
			t.Fatal(err)
		}
		ob.HandOff(conv, []store.Queued{{OutboxJob: job}}, 0)
	}
	queue("first")
	done := make(chan struct{})
	go func() { defer close(done); ob.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for running := false; !running; {
		ob.mu.Lock()
		running = ob.lanesCtx != nil
		ob.mu.Unlock()
		runtime.Gosched() // hand over as soon as lanes open, before any scan
	}
	queue("second")
	deadline := time.Now().Add(10 * time.Second)
	for len(rec.list()) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := rec.list(); len(got) != 2 || got[0] != "first" || got[1] != "second" {
		t.Fatalf("delivered %q, want [first second]", got)
	}
}
