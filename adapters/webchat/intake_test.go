package webchat

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	coregateway "github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

// The database is started only by tests that ask for one.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// A NUL in a message gets a clear error frame, and the socket goes on.
func TestNULGetsAClearErrorFrame(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	c := f.dial(t, f.login(t))
	want(t, c.next(), "type", "hello")
	c.write(`{"type":"message","id":"m-1","text":"hi\u0000"}`)
	want(t, c.next(), "type", "error", "id", "m-1", "code", "bad_text")
	c.write(`{"type":"message","id":"m-2","text":"hi"}`)
	want(t, c.next(), "type", "ack", "id", "m-2")
	if n := len(f.inbox.recorded()); n != 1 {
		t.Fatalf("%d turns delivered; want 1", n)
	}
}

// FuzzFrameIntake sends arbitrary frames through the web chat's intake
// (frame → turn → engine.Deliver → PostgreSQL): every frame is either
// refused with a coded error frame or stored (or refused by the core as
// a client error) — never an internal error — and afterwards no turn is
// left pending.
func FuzzFrameIntake(f *testing.F) {
	for _, s := range []string{
		`{"type":"message","id":"m-1","text":"hi\u0000"}`,
		"{\"type\":\"message\",\"id\":\"m-2\",\"text\":\"hi\xff\"}",
		`{"type":"message","id":"m-3","text":"\\u0000 \u202e"}`,
		`{"type":"message","id":"m-4","text":"/run echo x"}`,
		`{"type":"tap","id":"t-1","card_id":"nosuchcard","choice":"approve"}`,
		`{"type":"message","id":"m-5","text":"/whoami"}`,
	} {
		f.Add([]byte(s))
	}
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.NewDatabase(f), store.Options{})
	if err != nil {
		f.Fatal(err)
	}
	a, err := New(Config{})
	if err != nil {
		f.Fatal(err)
	}
	sb, err := sandbox.New(sandbox.Config{BaseDir: f.TempDir()})
	if err != nil {
		f.Fatal(err)
	}
	pol, _ := policy.New(nil)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	eng, err := coregateway.New(coregateway.Config{Store: st, Channels: []core.Channel{a}, Agent: agent.Command{}, Sandbox: sb,
		Policy: pol, Key: key, Owners: []core.IdentityID{"webchat:local"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = eng.Run(runCtx, 5*time.Second) }()
	<-eng.Ready()
	n := 0
	f.Cleanup(func() {
		deadline := time.Now().Add(20 * time.Second)
		for {
			var pending int
			if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM turns WHERE status = 'pending'`).Scan(&pending); err != nil {
				f.Error(err)
				break
			}
			if pending == 0 {
				break
			}
			if time.Now().After(deadline) {
				f.Errorf("%d turns still pending", pending)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		stop()
		<-done
		st.Close()
	})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := ParseFrame(b)
		if err != nil {
			return // coded FrameError: FuzzParseFrame checks those
		}
		n++
		fr.ID = fmt.Sprintf("f%d", n) // each input is a new event
		_, err = eng.Deliver(ctx, a.frameTurn(fr))
		var rej *core.RejectedError
		if err != nil && !errors.As(err, &rej) {
			t.Fatalf("Deliver(%q): %v", b, err)
		}
	})
}

// The web page edits in place and shows buttons, and declares no more.
func TestCapabilities(t *testing.T) {
	t.Parallel()
	a, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	got := core.CapabilitiesOf(a)
	if !got.EditInPlace || !got.Buttons || got.MaxTextLen != 0 {
		t.Fatalf("capabilities = %+v", got)
	}
	if _, ok := core.Channel(a).(core.MessageDeleter); ok {
		t.Fatal("the web page deletes nothing")
	}
}
