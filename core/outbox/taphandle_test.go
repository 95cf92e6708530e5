package outbox

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/tapseal"
	"github.com/silas-gateway/silas/internal/storetest"
)

// handleTaker answers taps and records the handle each answer carried.
type handleTaker struct {
	recorder
	hmu     sync.Mutex
	handles []string
}

func (h *handleTaker) AnswerTap(_ context.Context, a core.TapAnswer) error {
	h.hmu.Lock()
	defer h.hmu.Unlock()
	h.handles = append(h.handles, a.Handle)
	return nil
}

func (h *handleTaker) answered() []string {
	h.hmu.Lock()
	defer h.hmu.Unlock()
	return append([]string(nil), h.handles...)
}

// syncBuffer is a log sink the lanes may write concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// An answer job's handle is sealed at rest: the lane opens it just before
// AnswerTap, so the channel gets the plain handle. A handle that does not
// open — altered, or sealed for another tap — is never handed to
// AnswerTap: the tap is answered as on a channel without it (a refusal as
// a message), with a warning that does not quote the handle.
func TestLaneOpensSealedTapHandles(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := store.Open(ctx, storetest.NewDatabase(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	seal, err := tapseal.New(key)
	if err != nil {
		t.Fatal(err)
	}
	const conv core.ConversationID = "test:chat"
	const canary = "https://hooks.slack.test/actions/T1/1/CANARY-response-url"
	sealed := func(event string) string {
		s, err := seal.Seal(canary, string(conv), event)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tampered := []byte(sealed("e2"))
	if i := len(tampered) - 3; tampered[i] == 'A' { // one character of the tag, still base64
		tampered[i] = 'B'
	} else {
		tampered[i] = 'A'
	}
	jobs := []struct{ event, handle string }{
		{"e1", sealed("e1")},
		{"e2", string(tampered)},
		{"e3", sealed("e1")}, // e1's handle moved to another tap
		{"e4", canary},       // never sealed
		{"e5", sealed("e5")}, // the lane carries on answering
	}
	for _, j := range jobs {
		a := core.TapAnswer{Conversation: conv, EventID: j.event, Sender: "test:owner", Tap: core.Tap{Card: "c1", Choice: "approve"},
			Handle: j.handle, Text: "refused " + j.event, Refused: core.RefusedAlreadyDecided}
		err := st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			return nil, tx.QueueTapAnswer("test", "tap-"+j.event, a)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	ch := &handleTaker{}
	logs := &syncBuffer{}
	ob := New(Config{Store: st, Channels: map[core.ChannelName]core.Channel{"test": ch},
		Logger: slog.New(slog.NewTextHandler(logs, nil)), Now: time.Now, Handles: seal})
	done := make(chan struct{})
	go func() { defer close(done); ob.Run(ctx) }()
	defer func() { cancel(); <-done }()
	ob.Kick(conv, -1)
	deadline := time.Now().Add(20 * time.Second)
	for len(ch.answered())+len(ch.list()) < len(jobs) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := ch.answered(); len(got) != 2 || got[0] != canary || got[1] != canary {
		t.Fatalf("AnswerTap got handles %q; want the plain handle for e1 and e5 only", got)
	}
	if got, want := ch.list(), []string{"refused e2", "refused e3", "refused e4"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("sent %q; want the refusals of the taps whose handle did not open, as messages %q", got, want)
	}
	out := logs.String()
	if strings.Count(out, "tap handle does not open") != 3 {
		t.Fatalf("want one warning per handle that did not open; log:\n%s", out)
	}
	if strings.Contains(out, "CANARY") || strings.Contains(out, "th1.") {
		t.Fatalf("the log quotes a handle:\n%s", out)
	}
}
