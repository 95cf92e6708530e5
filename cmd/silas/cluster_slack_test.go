package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

// startSlackBurstCluster starts n instances in Socket Mode against a fake
// Slack, for a burst about failover rather than Slack's pace: at one post
// a second per channel a DM's 20 replies alone would take 20 s, and at the
// adapter's default 20 calls a second across channels 1,000 replies 50 s,
// so the adapter is given 200 ms per channel and 1,000 a second through
// its documented keys, and the fake demands the per-channel spacing (with
// its usual 100 ms tolerance).
func startSlackBurstCluster(t *testing.T, n int) (*slacktest.Server, string, []*server) {
	t.Helper()
	const perChannel = 200 * time.Millisecond
	srv := slacktest.NewServer(t, slacktest.Options{PerChannelInterval: perChannel})
	dsn := storetest.NewDatabase(t)
	servers := startCluster(t, dsn, n, append(slackSocketEnv(t, srv),
		"SILAS_SLACK_LIMITS_PER_CHANNEL_INTERVAL="+perChannel.String(), "SILAS_SLACK_LIMITS_GLOBAL_PER_SECOND=1000")...)
	return srv, dsn, servers
}

// slackBurst is issue 25's burst, 1,000 messages over 50 DMs (users
// padded to 50, 20 each, 2 ms apart); with -short the users, messages per
// user and gap given.
func slackBurst(users []string, perUser int, gap time.Duration) ([]string, int, time.Duration) {
	if testing.Short() {
		return users, perUser, gap
	}
	for i := len(users); i < 50; i++ {
		users = append(users, fmt.Sprintf("U0B%03d", i))
	}
	return users, 20, 2 * time.Millisecond
}

// TestClusterSlackSocketFailover: three instances in Socket Mode against
// the fake Slack; only the holder of the lease slack/slack opens a socket.
// The holder is SIGKILLed mid-burst, then the next holder: another
// instance takes the lease and opens the one socket (never two open at
// once: no ghost socket), the fake redelivers what was not acknowledged,
// and every message is stored once, answered once, in order per DM (a
// reply sent just before a kill and not yet recorded may come twice, at
// most once per DM per kill, as in TestSlackSIGKILLBurst).
//
// The burst is issue 25's: 1,000 messages over 50 DMs (-short: 32 over
// 4), at lifted limits (startSlackBurstCluster).
func TestClusterSlackSocketFailover(t *testing.T) {
	t.Parallel()
	srv, dsn, servers := startSlackBurstCluster(t, 3)
	users, perUser, gap := slackBurst([]string{"U0OLIVE", "U0SAM", "U0MIA", "U0LEO"}, 8, 20*time.Millisecond)
	dm := func(u string) string { return "D" + u[1:] }
	total := perUser * len(users)
	var sent sync.WaitGroup
	sent.Add(1)
	go func() {
		defer sent.Done()
		for n := range perUser {
			for _, u := range users {
				srv.Send(slacktest.Msg{Channel: dm(u), User: u, Text: fmt.Sprintf("/m%d", n)})
				time.Sleep(gap)
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
	// Not in the order sent: an event Slack wrote to the killed holder's
	// socket and was never acknowledged comes back only when Slack
	// retries it, after later events reached the new socket (Socket Mode
	// has no cursor; docs/operations.md). Replies follow the stored
	// turns' order (checkSlackBurst), and with these 1,000 messages the
	// order sent was lost in about one run in two.
	checkSlackBurst(t, dsn, srv, servers, users, perUser, kills, false)
	// No ghost socket: one open at a time, and one open now.
	if m := srv.MaxLive(); m > 1 {
		t.Errorf("%d Socket Mode connections at once", m)
	}
	if l := srv.Live(); l != 1 {
		t.Errorf("%d Socket Mode connections open at the end, want 1", l)
	}
	checkSlackViolations(t, srv, false)
}

// checkSlackViolations fails on what the fake Slack flagged, except two
// things several instances do by design or cannot help. A send to a DM
// less than a second after the previous one: each instance paces its
// own sends, and the instance that takes a lane over does not know when
// the last one went out (Slack answers 429 with Retry-After, which the
// outbox honours; nothing is lost). And, when paused, two sockets open at
// once: a paused process cannot close its own.
func checkSlackViolations(t *testing.T, srv *slacktest.Server, paused bool) {
	t.Helper()
	for _, v := range srv.Violations() {
		switch {
		case strings.Contains(v, "after the previous call"):
			t.Logf("fake Slack (per-process pacing across a takeover): %s", v)
		case paused && strings.Contains(v, "Socket Mode connections open at once"):
			t.Logf("fake Slack (the paused instance's socket): %s", v)
		default:
			t.Errorf("fake Slack: %s", v)
		}
	}
}

// checkSlackBurst waits for every reply to users' DMs (perUser each) and
// checks them: stored, answered and delivered once, in order per DM when
// ordered, a reply sent twice at most once per DM per stop (a send not
// yet recorded when its instance died or paused). Envelopes a paused
// instance's socket swallowed are redelivered meanwhile, as Slack
// retries them.
func checkSlackBurst(t *testing.T, dsn string, srv *slacktest.Server, servers []*server, users []string, perUser, stops int, ordered bool) {
	t.Helper()
	dm := func(u string) string { return "D" + u[1:] }
	total := perUser * len(users)
	stored := func() int { return dbCount(t, dsn, `SELECT count(*) FROM turns WHERE channel = 'slack'`) }
	var redelivered time.Time
	waitForOr(t, "every reply", func() { dumpCluster(t, dsn, servers) }, func() bool {
		got := 0
		for _, u := range users {
			got += len(srv.Messages(dm(u)))
		}
		if srv.Pending() > 0 && time.Since(redelivered) > time.Second {
			srv.Redeliver()
			redelivered = time.Now()
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
		seen := map[int]int{}
		// The outbox's promise holds whatever the platform did: a DM's
		// replies go out in the order its turns were stored (a reply
		// sent again just before a stop aside).
		var order []int
		rows, err := testPool(t, dsn).Query(t.Context(), `SELECT body->>'text' FROM turns
			WHERE channel = 'slack' AND conversation = 'slack:' || $1 ORDER BY seq`, u)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var text string
			if err := rows.Scan(&text); err != nil {
				t.Fatal(err)
			}
			if sm := numberedRe.FindStringSubmatch(text); sm != nil {
				n, _ := strconv.Atoi(sm[1])
				order = append(order, n)
			}
		}
		rows.Close()
		var replies []int
		for _, m := range srv.Messages(dm(u)) {
			if sm := numberedRe.FindStringSubmatch(m.Text); sm != nil {
				n, _ := strconv.Atoi(sm[1])
				if len(replies) == 0 || replies[len(replies)-1] != n {
					replies = append(replies, n)
				}
			}
		}
		if !slices.Equal(replies, order) {
			t.Errorf("%s: replies %v, not in the order the turns were stored %v", u, replies, order)
		}
		for _, m := range srv.Messages(dm(u)) {
			sm := numberedRe.FindStringSubmatch(m.Text)
			if sm == nil {
				t.Errorf("%s: unexpected reply %q", u, m.Text)
				continue
			}
			n, _ := strconv.Atoi(sm[1])
			if seen[n]++; seen[n] > 1 {
				doubles++
			}
			switch {
			case n == next:
				next++
			case ordered && n != next-1:
				t.Errorf("%s: reply to /m%d arrived when /m%d was next", u, n, next)
			}
		}
		for n := range perUser {
			if seen[n] == 0 {
				t.Errorf("%s: no reply to /m%d", u, n)
			}
		}
	}
	if limit := stops * len(users); doubles > limit {
		t.Errorf("%d replies delivered twice; at most %d can be", doubles, limit)
	}
}

// TestClusterSlackSIGSTOP pauses the Socket Mode holder (SIGSTOP, a
// frozen VM) mid-burst past its lease: its socket stays open but dead
// (Slack still writes events to it), another instance takes the lease and
// opens the socket. When the paused one wakes (SIGCONT) it finds its
// lease gone: it acknowledges nothing it reads from its old socket, which
// Slack then redelivers to the live one, and it closes that socket — no
// ghost socket is left. Every message is stored and answered once; the
// order per DM is not kept across the pause (see checkSlackBurst's call).
//
// The burst is issue 25's 1,000 messages over 50 DMs (-short: 18 over 3),
// at lifted limits (startSlackBurstCluster).
func TestClusterSlackSIGSTOP(t *testing.T) {
	t.Parallel()
	srv, dsn, servers := startSlackBurstCluster(t, 2)
	users, perUser, gap := slackBurst([]string{"U0OLIVE", "U0SAM", "U0MIA"}, 6, 10*time.Millisecond)
	dm := func(u string) string { return "D" + u[1:] }
	send := func(from, to int) {
		for n := from; n < to; n++ {
			for _, u := range users {
				srv.Send(slacktest.Msg{Channel: dm(u), User: u, Text: fmt.Sprintf("/m%d", n)})
				time.Sleep(gap)
			}
		}
	}
	var holder *server
	waitFor(t, "a socket holder", func() bool {
		for s, n := range slackHolding(servers) {
			if n > 0 {
				holder = s
			}
		}
		return holder != nil
	})
	before := slackHolding(servers)
	send(0, perUser/3)
	if err := holder.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			holder.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	send(perUser/3, 2*perUser/3) // some go to the paused socket
	waitForOr(t, "another instance to open the socket", func() { dumpCluster(t, dsn, servers) }, func() bool {
		now := slackHolding(servers)
		for _, s := range servers {
			if s != holder && now[s] > before[s] {
				return true
			}
		}
		return false
	})
	if err := holder.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	send(2*perUser/3, perUser)
	// Not in order: what Slack wrote to the paused socket reaches the
	// live one only when Slack retries it, after later events (Socket
	// Mode has no cursor to resume from; docs/operations.md).
	checkSlackBurst(t, dsn, srv, servers, users, perUser, 1, false)
	// The woken instance closed its old socket: one is open.
	waitFor(t, "one Socket Mode connection", func() bool { return srv.Live() == 1 })
	checkSlackViolations(t, srv, true)
}
