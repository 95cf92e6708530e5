package main

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/storetest"
)

var handRe = regexp.MustCompile(`hand-\d+`)

// TestClusterWhatsAppHandOver: two instances with WhatsApp on one
// database (the fake WhatsApp server); only the holder of the device
// lease connects. Messages queued for the owner's WhatsApp chat by no
// instance in particular (as a CLI or a job elsewhere does) are started
// by whichever instance's recovery scan runs first. The instance without
// the device hands the conversation over (LISTEN/NOTIFY) and the holder
// delivers: every message once, in order. Then the holder is SIGKILLed
// and messages are queued at once: the survivor takes the device lease,
// connects, and delivers what waited.
//
// Checked to fail: without the hand-over (outbox heldElsewhere), the
// instance without the device claims the conversation, its sends fail
// ("not connected") and are retried with backoff while the holder cannot
// claim it: a batch that instance started is never delivered.
func TestClusterWhatsAppHandOver(t *testing.T) {
	t.Parallel()
	bin := whatsappFakeBinary(t)
	ctx := context.Background()
	dsn := storetest.NewDatabase(t)
	srv, phone, dev, hook := fakeWhatsApp(t, dsn)
	servers := startClusterOf(t, bin, dsn, 2, "SILAS_WHATSAPP_ENABLED=true", "WHATSAPPTEST_FAKE_SERVER="+hook,
		"SILAS_IDENTITIES_OWNERS=webchat:local,whatsapp:4915112345678")
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := srv.WaitReady(wctx); err != nil {
		t.Fatalf("no instance logged in to the fake: %v", err)
	}
	// The owner writes first, as a chat starts.
	if err := srv.SendText(ctx, phone, dev, "3EB0C1A5000001", "/whoami"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the answer on WhatsApp", func() bool { return receivedContaining(srv, "whatsapp:4915112345678") })
	var holder, other *server
	for i, s := range servers {
		if strings.Contains(s.logs.String(), "whatsapp: connecting under the device lease") {
			holder, other = s, servers[1-i]
		}
	}
	if holder == nil {
		t.Fatal("no instance holds the device lease")
	}

	st, err := store.Open(ctx, dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const conv = core.ConversationID("whatsapp:4915112345678@s.whatsapp.net")
	n := 0
	queue := func(k int) {
		for range k {
			n++
			m := core.OutMessage{Conversation: conv, Text: fmt.Sprintf("hand-%02d", n)}
			if err := st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
				return nil, tx.QueueMessageThen("whatsapp", core.OpSend, fmt.Sprintf("cluster-hand-%d", n), m, func(int64) {})
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := func() []string {
		var out []string
		for _, r := range srv.Received() {
			if s := handRe.FindString(r.Message.GetConversation() + r.Message.GetExtendedTextMessage().GetText()); s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	delivered := func(what string) {
		t.Helper()
		waitForOr(t, what, func() { t.Logf("the phone has %q", got()); dumpCluster(t, dsn, servers) }, func() bool {
			return len(got()) >= n && dbCount(t, dsn, `SELECT count(*) FROM outbox WHERE status = 'pending'`) == 0
		})
	}
	// Batches until the instance without the device started one (its
	// scan ran first) and handed it over — about every other batch.
	handedOver := func() bool { return strings.Contains(other.logs.String(), "handed the conversation over") }
	for batch := 0; batch < 2 || (!handedOver() && batch < 12); batch++ {
		queue(3)
		delivered(fmt.Sprintf("batch %d", batch))
	}
	t.Logf("%d batches; hand-overs by the instance without the device: %d", n/3, strings.Count(other.logs.String(), "handed the conversation over"))
	if !handedOver() {
		t.Fatal("the instance without the device never started a batch (12 batches): the hand-over was not exercised")
	}

	holder.kill(t)
	queue(3)
	delivered("the messages queued after the holder died")
	if !strings.Contains(other.logs.String(), "whatsapp: connecting under the device lease") {
		t.Error("the survivor delivered without holding the device lease")
	}
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("hand-%02d", i+1)
	}
	if g := got(); !slices.Equal(g, want) {
		t.Errorf("the phone received %q; want %q (each once, in order)", g, want)
	}
	if d := dbCount(t, dsn, `SELECT count(*) FROM outbox WHERE message_key LIKE 'cluster-hand-%' AND status = 'delivered'`); d != n {
		t.Errorf("%d of %d recorded delivered", d, n)
	}
}
