//go:build !race

// Not built with -race: see realclient_test.go.

package whatsapp

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/silas-gateway/silas/internal/pgtest"
)

// TestRealClientRecoversOnItsOwn: the real whatsmeow client on the fake
// server loses its connection in the ways the peer gateway never recovers
// from — a 408 and a 428 stream error (the server ends the stream and
// closes), and a connection that silently stops answering keepalives —
// and each time the adapter logs in again by itself and the next message
// from the phone is a turn.
func TestRealClientRecoversOnItsOwn(t *testing.T) {
	fastKeepalives(t)
	log := slog.New(slog.DiscardHandler)
	r := newRealRig(t, pgtest.NewDatabase(t), log)
	in := &recInbox{}
	a := r.adapter(t, log)
	r.run(t, a, in)
	steps := []struct {
		name   string
		break_ func()
	}{
		{"stream error 408", func() { r.srv.StreamError("408", "") }},
		{"stream error 428", func() { r.srv.StreamError("428", "") }},
		{"keepalive not answered", r.srv.StopAnsweringKeepalives},
		{"server drop", r.srv.DropConnection},
	}
	for i, s := range steps {
		logins := r.srv.Logins()
		s.break_()
		eventually(t, s.name+": a new login", func() bool { return r.srv.Logins() > logins && a.Status().Connected })
		id := fmt.Sprintf("3EB0BBBB%04d", i)
		if err := r.srv.SendText(context.Background(), r.phone, r.dev, id, "after "+s.name); err != nil {
			t.Fatal(err)
		}
		eventually(t, s.name+": the next message is a turn", func() bool { return len(in.all()) == i+1 && r.srv.Receipts(id) == 1 })
		if got := in.all()[i].Text; got != "after "+s.name {
			t.Fatalf("%s: turn %q", s.name, got)
		}
		if p := a.Status().Problem; p != "" {
			t.Fatalf("%s: problem recorded: %s", s.name, p)
		}
	}
}
