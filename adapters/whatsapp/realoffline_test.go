//go:build !race

// Not built with -race: see realclient_test.go.

package whatsapp

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/channeltest"
	"github.com/silas-gateway/silas/adapters/whatsapp/whatsapptest"
	"github.com/silas-gateway/silas/internal/pgtest"
)

// TestRealClientOfflineBatchOnce: messages the phone sends while Silas is
// stopped arrive after the next login as WhatsApp's offline batch
// (offline_preview … messages … offline) and become turns, in order. The
// receipts of that batch are lost with the connection, so the server
// sends the whole batch again after the following login — the same
// ciphertexts — and nothing is a turn twice, while every message ends
// acknowledged.
func TestRealClientOfflineBatchOnce(t *testing.T) {
	logs := &channeltest.SyncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	r := newRealRig(t, pgtest.NewDatabase(t), slog.New(slog.DiscardHandler))
	in := &recInbox{}
	a := r.adapter(t, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx, in) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	if err := r.srv.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "connected", func() bool { return a.Status().Connected })
	// Silas stops; the phone writes meanwhile.
	cancel()
	<-done
	ids := []string{"3EB0DDDD0001", "3EB0DDDD0002", "3EB0DDDD0003"}
	for i, id := range ids {
		if err := r.srv.SendText(context.Background(), r.phone, r.dev, id, fmt.Sprintf("offline %d", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	r.srv.LoseReceipts(true)
	r.run(t, a, in) // the next start
	eventually(t, "the offline batch as turns", func() bool { return len(in.all()) == 3 })
	eventually(t, "the end of the offline batch", func() bool { return strings.Contains(logs.String(), "offline messages delivered") })
	if !strings.Contains(logs.String(), "delivering what arrived while offline") || !strings.Contains(logs.String(), "messages=3") {
		t.Fatalf("no offline preview of 3 messages in the log:\n%s", logs.String())
	}
	// The connection dies before the receipts arrived: after the next
	// login the batch comes again. Receipts go out after the handler
	// returned (SynchronousAck), a moment after the turn is visible, so
	// wait until the fake has dropped each one: a receipt still in flight
	// when they are let through again would go out on the next connection
	// after the fake queued the batch again, and count twice.
	waitReceipts(t, r.srv, ids, "each receipt of the first batch lost", func(id string) bool { return r.srv.LostReceipts(id) >= 1 })
	r.srv.LoseReceipts(false)
	logins := r.srv.Logins()
	r.srv.DropConnection()
	eventually(t, "a new login", func() bool { return r.srv.Logins() > logins })
	// A receipt goes out only after the handler returned, so once each
	// message of the second batch is acknowledged, any second turn would
	// already be in the inbox: no sleep needed before counting turns.
	waitReceipts(t, r.srv, ids, "every message acknowledged once", func(id string) bool { return r.srv.Receipts(id) == 1 })
	turns := in.all()
	if len(turns) != 3 {
		t.Fatalf("%d turns after the batch came twice; want 3", len(turns))
	}
	for i, tr := range turns {
		if tr.Text != fmt.Sprintf("offline %d", i+1) || tr.EventID != "m"+owner.User+"/"+ids[i] {
			t.Fatalf("turn %d: %+v", i, tr)
		}
	}
	if o := r.srv.OtherReceipts(); len(o) != 0 {
		t.Fatalf("retry receipts (the device could not decrypt): %v", o)
	}
}

// waitReceipts waits until ok holds for every id, failing with each id's
// receipt counts (delivered, lost) when it does not.
func waitReceipts(t *testing.T, srv *whatsapptest.Server, ids []string, what string, ok func(id string) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		all := true
		for _, id := range ids {
			all = all && ok(id)
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			var counts []string
			for _, id := range ids {
				counts = append(counts, fmt.Sprintf("%s: %d delivered, %d lost", id, srv.Receipts(id), srv.LostReceipts(id)))
			}
			t.Fatalf("timed out waiting for %s; receipts: %s; other receipts: %v", what, strings.Join(counts, "; "), srv.OtherReceipts())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
