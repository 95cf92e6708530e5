package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/telegram/telegramtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

// fastTelegramLimits are a fifth of Telegram's per-chat pace, for tests
// about something else than the pace: the fake enforces them (its slack
// the same share of the interval as at Telegram's 1 s), and
// fastTelegramEnv gives the adapter the same through its documented key.
var fastTelegramLimits = telegramtest.Limits{PerChat: 200 * time.Millisecond, Slack: 60 * time.Millisecond}

const fastTelegramEnv = "SILAS_TELEGRAM_LIMITS_PER_CHAT_INTERVAL=200ms"

// TestTelegramSIGKILLBurst runs the real binary with Telegram polling a
// fake Bot API and kills it with SIGKILL twice while a burst of updates
// arrives. Every update is stored and answered exactly once: the offset
// moves only past stored updates, a redelivered update is a no-op, and the
// answer commits with the turn. Replies are delivered at least once: one
// sent just before a SIGKILL, whose delivery was not yet recorded, is sent
// again after the restart (Telegram has no idempotency key for sends, and
// skipping a send that may not have arrived would lose it), so doubles are
// counted and bounded — one per chat per kill — not forbidden.
func TestTelegramSIGKILLBurst(t *testing.T) {
	t.Parallel()
	// The burst is about SIGKILLs, not Telegram's pace: at its one message
	// a second per chat the 15 replies of each chat alone took 15 s. The
	// adapter and the fake share a faster pace (fastTelegramLimits), and
	// any violation fails.
	srv := telegramtest.NewServer(t, telegramtest.Options{Limits: fastTelegramLimits})
	dsn := storetest.NewDatabase(t)
	dataDir := t.TempDir()
	env := []string{"SILAS_TELEGRAM_ENABLED=true", "SILAS_TELEGRAM_TOKEN=" + srv.Token, "SILAS_TELEGRAM_BASE_URL=" + srv.URL,
		"SILAS_TELEGRAM_DM_POLICY=open", "SILAS_TELEGRAM_POLL_TIMEOUT=1s", "SILAS_TELEGRAM_BOT_USERNAME=" + srv.BotUsername,
		fastTelegramEnv, "SILAS_IDENTITIES_OWNERS=webchat:local,telegram:1001"}
	env = append(env, shortLease) // the restarted serve waits for the killed one's lease
	users := []telegramtest.User{{ID: 1001, FirstName: "Olive"}, {ID: 2002, FirstName: "Sam"}, {ID: 3003, FirstName: "Mia"}}
	const perUser = 15
	total := perUser * len(users)
	want := map[int64]map[string]int{}
	for _, u := range users {
		trust := "external"
		if u.ID == 1001 {
			trust = "owner"
		}
		want[u.ID] = map[string]int{fmt.Sprintf("You are telegram:%d with %s trust.", u.ID, trust): perUser}
	}

	s := startServer(t, dsn, dataDir, env...)
	var sent sync.WaitGroup
	sent.Add(1)
	go func() {
		defer sent.Done()
		for range perUser {
			for _, u := range users {
				srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(u), From: u, Text: "/whoami"})
				time.Sleep(15 * time.Millisecond)
			}
		}
	}()
	stored := func() int { return dbCount(t, dsn, `SELECT count(*) FROM turns WHERE channel = 'telegram'`) }
	// The first kill lands while updates are being stored, the second while
	// replies are being sent.
	kills := []struct{ turns, sends int }{{total / 4, 0}, {total / 2, 4}}
	for i, k := range kills {
		deadline := time.Now().Add(60 * time.Second)
		for stored() < k.turns || len(srv.Calls("sendMessage")) < k.sends {
			if time.Now().After(deadline) {
				t.Fatalf("kill %d: %d turns stored, %d sends; waiting for %+v\n%s", i+1, stored(), len(srv.Calls("sendMessage")), k, s.logs.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := s.cmd.Process.Kill(); err != nil { // SIGKILL
			t.Fatal(err)
		}
		s.waitExit(t)
		t.Logf("SIGKILL %d: %d turns stored, %d sendMessage calls so far", i+1, stored(), len(srv.Calls("sendMessage")))
		s = startServer(t, dsn, dataDir, env...)
	}
	sent.Wait()

	deadline := time.Now().Add(90 * time.Second)
	for {
		got := 0
		for _, u := range users {
			got += len(srv.Messages(u.ID))
		}
		pendingJobs := dbCount(t, dsn, `SELECT count(*) FROM outbox WHERE status = 'pending'`)
		pendingTurns := dbCount(t, dsn, `SELECT count(*) FROM turns WHERE status = 'pending'`)
		// Every update confirmed (none comes again), every turn handled,
		// every job sent: no late double can come after this.
		if got >= total && srv.Pending() == 0 && pendingJobs == 0 && pendingTurns == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d replies, %d updates unconfirmed, %d jobs and %d turns pending\n%s", got, total, srv.Pending(), pendingJobs, pendingTurns, s.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Exactly once: every update is one turn, answered once.
	if n := stored(); n != total {
		t.Errorf("turns = %d, want %d", n, total)
	}
	if n := dbCount(t, dsn, `SELECT count(DISTINCT event_id) FROM turns WHERE channel = 'telegram'`); n != total {
		t.Errorf("distinct events = %d, want %d", n, total)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM turns WHERE channel = 'telegram' AND status = 'done'`); n != total {
		t.Errorf("turns done = %d, want %d", n, total)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM outbox WHERE channel = 'telegram'`); n != total {
		t.Errorf("replies enqueued = %d, want one per update (%d)", n, total)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM outbox WHERE channel = 'telegram' AND status = 'delivered'`); n != total {
		t.Errorf("replies delivered = %d, want %d", n, total)
	}
	// At least once: every reply arrived; doubles only from a kill.
	doubles := 0
	for _, u := range users {
		got := map[string]int{}
		for _, m := range srv.Messages(u.ID) {
			got[m.Text]++
		}
		for text, n := range got {
			if w := want[u.ID][text]; n > w {
				doubles += n - w
			}
		}
		for text, w := range want[u.ID] {
			if got[text] < w {
				t.Errorf("user %d: %d × %q, want %d (all: %v)", u.ID, got[text], text, w, got)
			}
		}
		for text := range got {
			if _, ok := want[u.ID][text]; !ok {
				t.Errorf("user %d got an unexpected message %q", u.ID, text)
			}
		}
	}
	for _, v := range srv.Violations() {
		t.Errorf("rate limit exceeded: %s", v)
	}
	// Each chat's lane has at most one send whose record is not yet
	// committed, so a kill can double at most one reply per chat.
	if limit := len(kills) * len(users); doubles > limit {
		t.Errorf("%d replies delivered twice; at most %d (one per chat per SIGKILL) can be", doubles, limit)
	} else if doubles > 0 {
		t.Logf("%d replies delivered twice (sent just before a SIGKILL, not yet recorded)", doubles)
	}
	for _, v := range srv.Violations() {
		t.Errorf("rate limit exceeded: %s", v)
	}
	// In serve's data_dir: its audit.pub checks the signed checkpoints.
	if code, out, _ := silasIn(t, dsn, dataDir, "audit", "verify"); code != 0 || !strings.Contains(out, "intact") {
		t.Errorf("audit verify = %d: %s", code, out)
	}
}
