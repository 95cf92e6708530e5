package main

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/discord/discordtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

// TestDiscordSIGKILLBurst runs the real binary on the Discord gateway of a
// fake Discord, configured only through the discord.* keys, and kills it
// with SIGKILL twice while DMs arrive — some of them while it is down.
// Every message is stored and answered: the catch-up after each READY
// fetches what was sent meanwhile, a message seen twice is a no-op, and
// replies are at least once (one per conversation per kill may repeat, as
// with Telegram).
func TestDiscordSIGKILLBurst(t *testing.T) {
	t.Parallel()
	srv := discordtest.NewServer(t)
	dsn := storetest.NewDatabase(t)
	dataDir := t.TempDir()
	users := []discordtest.User{{ID: "1300000000000000001", Username: "olive"}, {ID: "1300000000000000002", Username: "sam"}}
	env := []string{"SILAS_DISCORD_ENABLED=true", "SILAS_DISCORD_TOKEN=" + discordtest.Token, "SILAS_DISCORD_APPLICATION_ID=" + discordtest.AppID,
		"SILAS_DISCORD_BASE_URL=" + srv.BaseURL, "SILAS_DISCORD_DM_POLICY=open",
		"SILAS_IDENTITIES_OWNERS=webchat:local,discord:" + users[0].ID}
	env = append(env, shortLease) // the restarted serve waits for the killed one's lease
	const perUser = 10
	total := perUser * len(users)
	stored := func() int { return dbCount(t, dsn, `SELECT count(*) FROM turns WHERE channel = 'discord'`) }

	s := startServer(t, dsn, dataDir, env...)
	waitConnected := func() {
		deadline := time.Now().Add(60 * time.Second)
		for !srv.Connected() {
			if time.Now().After(deadline) {
				t.Fatalf("no gateway session:\n%s", s.logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitConnected()
	// A first message per user, so each DM is a known conversation.
	for _, u := range users {
		srv.SendMessage(u, srv.DM(u.ID), "/whoami", false)
	}
	var sent sync.WaitGroup
	sent.Add(1)
	go func() {
		defer sent.Done()
		for range perUser - 1 {
			for _, u := range users {
				srv.SendMessage(u, srv.DM(u.ID), "/whoami", false)
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	for i, at := range []int{total / 4, total / 2} {
		deadline := time.Now().Add(60 * time.Second)
		for stored() < at {
			if time.Now().After(deadline) {
				t.Fatalf("kill %d: %d turns stored\n%s", i+1, stored(), s.logs.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := s.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		s.waitExit(t)
		srv.DropConnection()
		time.Sleep(150 * time.Millisecond) // messages arrive while it is down
		s = startServer(t, dsn, dataDir, env...)
		waitConnected()
	}
	sent.Wait()
	replies := func(u discordtest.User) int {
		n := 0
		for _, m := range srv.BotMessages(srv.DM(u.ID)) {
			if strings.Contains(m.Content, "You are discord") {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		got := 0
		for _, u := range users {
			got += min(replies(u), perUser)
		}
		if got >= total && dbCount(t, dsn, `SELECT count(*) FROM outbox WHERE status = 'pending'`) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d replies; %d turns\n%s", got, total, stored(), s.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := stored(); n != total {
		t.Errorf("turns = %d, want %d (each message once)", n, total)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM outbox WHERE channel = 'discord'`); n != total {
		t.Errorf("replies enqueued = %d, want %d", n, total)
	}
	for _, u := range users {
		if n := replies(u); n < perUser || n > perUser+2 {
			t.Errorf("user %s: %d replies, want %d (at most one more per kill)", u.ID, n, perUser)
		}
	}
	if code, out, _ := silasIn(t, dsn, dataDir, "audit", "verify"); code != 0 || !strings.Contains(out, "intact") {
		t.Errorf("audit verify = %d: %s", code, out)
	}
}
