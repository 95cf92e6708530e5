package main

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/slack/slacktest"
	"github.com/silas-gateway/silas/internal/storetest"
)

// slackHolding counts, per instance, its log lines saying it opened
// Socket Mode under the lease.
func slackHolding(servers []*server) map[*server]int {
	m := map[*server]int{}
	for _, s := range servers {
		m[s] = strings.Count(s.logs.String(), "slack: opening Socket Mode under the lease")
	}
	return m
}

// dead reports whether s exited.
func (s *server) dead() bool {
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// TestClusterSlackSocketFailover: three instances in Socket Mode against
// the fake Slack; only the holder of the lease slack/slack opens a socket.
// The holder is SIGKILLed mid-burst, then the next holder: another
// instance takes the lease and opens the one socket (never two open at
// once: no ghost socket), the fake redelivers what was not acknowledged,
// and every message is stored once, answered once, in order per DM (a
// reply sent just before a kill and not yet recorded may come twice, at
// most once per DM per kill, as in TestSlackSIGKILLBurst).
func TestClusterSlackSocketFailover(t *testing.T) {
	t.Parallel()
	srv := slacktest.NewServer(t, slacktest.Options{})
	dsn := storetest.NewDatabase(t)
	servers := startCluster(t, dsn, 3, slackSocketEnv(t, srv)...)
	users := []string{"U0OLIVE", "U0SAM", "U0MIA", "U0LEO"}
	dm := func(u string) string { return "D" + u[1:] }
	const perUser = 8
	total := perUser * len(users)
	var sent sync.WaitGroup
	sent.Add(1)
	go func() {
		defer sent.Done()
		for n := range perUser {
			for _, u := range users {
				srv.Send(slacktest.Msg{Channel: dm(u), User: u, Text: fmt.Sprintf("/m%d", n)})
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	stored := func() int { return dbCount(t, dsn, `SELECT count(*) FROM turns WHERE channel = 'slack'`) }
	seen := map[*server]int{}
	kills := 0
	for _, at := range []int{total / 4, total / 2} {
		var holder *server
		waitForOr(t, fmt.Sprintf("a socket holder and %d turns", at), func() { dumpCluster(t, dsn, servers) }, func() bool {
			if holder == nil {
				now := slackHolding(servers)
				for _, s := range servers {
					if now[s] > seen[s] && !s.dead() {
						holder = s
					}
				}
			}
			return holder != nil && stored() >= at
		})
		seen = slackHolding(servers)
		holder.kill(t)
		kills++
		t.Logf("SIGKILLed the socket holder at %d turns stored", stored())
	}
	sent.Wait()
	waitForOr(t, "every reply", func() { dumpCluster(t, dsn, servers) }, func() bool {
		got := 0
		for _, u := range users {
			got += len(srv.Messages(dm(u)))
		}
		return got >= total && srv.Pending() == 0 && stored() == total &&
			dbCount(t, dsn, `SELECT (SELECT count(*) FROM outbox WHERE status = 'pending') + (SELECT count(*) FROM turns WHERE status = 'pending')`) == 0
	})
	for _, c := range []struct{ q, what string }{
		{`SELECT count(*) FROM turns WHERE channel = 'slack'`, "turns"},
		{`SELECT count(DISTINCT event_id) FROM turns WHERE channel = 'slack'`, "distinct events"},
		{`SELECT count(*) FROM turns WHERE channel = 'slack' AND status = 'done'`, "turns done"},
		{`SELECT count(*) FROM outbox WHERE channel = 'slack' AND status = 'delivered'`, "replies delivered"},
	} {
		if n := dbCount(t, dsn, c.q); n != total {
			t.Errorf("%s = %d, want %d", c.what, n, total)
		}
	}
	doubles := 0
	for _, u := range users {
		next := 0
		for _, m := range srv.Messages(dm(u)) {
			sm := numberedRe.FindStringSubmatch(m.Text)
			if sm == nil {
				t.Errorf("%s: unexpected reply %q", u, m.Text)
				continue
			}
			n, _ := strconv.Atoi(sm[1])
			switch {
			case n == next:
				next++
			case n == next-1:
				doubles++
			default:
				t.Errorf("%s: reply to /m%d arrived when /m%d was next", u, n, next)
			}
		}
		if next != perUser {
			t.Errorf("%s: replies up to /m%d, want all %d", u, next-1, perUser)
		}
	}
	if limit := kills * len(users); doubles > limit {
		t.Errorf("%d replies delivered twice; at most %d can be", doubles, limit)
	}
	// No ghost socket: one open at a time, and one open now.
	if m := srv.MaxLive(); m > 1 {
		t.Errorf("%d Socket Mode connections at once", m)
	}
	if l := srv.Live(); l != 1 {
		t.Errorf("%d Socket Mode connections open at the end, want 1", l)
	}
	for _, v := range srv.Violations() {
		t.Errorf("fake Slack: %s", v)
	}
}
