package main

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/telegram/telegramtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

// TestClusterRollingRestart restarts two instances one at a time with
// SIGTERM, as a Kubernetes rolling update does, while messages keep
// arriving over the fake Telegram (polling under the lease): the lease
// holder is stopped mid-burst and started again, then the other one is
// stopped. Every message is answered exactly once — on the platform too:
// a clean stop records what it sent before it exits, so nothing is sent
// twice — and the replies in each chat arrive in order.
func TestClusterRollingRestart(t *testing.T) {
	t.Parallel()
	srv := telegramtest.NewServer(t, telegramtest.Options{})
	dsn := storetest.NewDatabase(t)
	env := append([]string{shortLease}, pollingEnv(srv)...)
	servers := startCluster(t, dsn, 2, env...)

	const chats = 6
	users := burstUsers(chats, 8001)
	var rounds atomic.Int32
	stop := make(chan struct{})
	var sent sync.WaitGroup
	sent.Add(1)
	go func() {
		// Steady load: a round (one message per chat) every ~200 ms until
		// both restarts are done.
		defer sent.Done()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			for _, u := range users {
				srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(u), From: u, Text: fmt.Sprintf("/m%d", n)})
				time.Sleep(30 * time.Millisecond)
			}
			rounds.Store(int32(n + 1))
		}
	}()
	stored := func() int { return dbCount(t, dsn, `SELECT count(*) FROM turns WHERE channel = 'telegram'`) }
	// moreTurns waits until n more turns than now are stored.
	moreTurns := func(what string, n int) {
		t.Helper()
		at := stored() + n
		waitForOr(t, what, func() { dumpCluster(t, dsn, servers) }, func() bool { return stored() >= at })
	}

	var holder *server
	waitFor(t, "a lease holder", func() bool { holder = pollingNow(servers, nil); return holder != nil })
	moreTurns("the first rounds", chats*2)
	// Stop the holder (its lease is released, the other polls at once),
	// and start it again on its data directory.
	i := 0
	if servers[1] == holder {
		i = 1
	}
	holder.stop()
	t.Logf("stopped the lease holder at %d turns", stored())
	servers[i] = startServer(t, dsn, holder.dataDir, env...)
	moreTurns("rounds after the first restart", chats*2)
	// Then the other instance.
	other := servers[1-i]
	other.stop()
	t.Logf("stopped the other instance at %d turns", stored())
	moreTurns("rounds after the second stop", chats*2)
	close(stop)
	sent.Wait()
	perChat := int(rounds.Load())

	waitEveryReply(t, dsn, srv, users, perChat, servers)
	// No kill: no reply may have reached the platform twice.
	checkClusterBurst(t, dsn, srv, users, perChat, 0)
}
