package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/slack/slacktest"
	"github.com/silas-gateway/silas/internal/storetest"
)

// TestSlackSIGKILLBurst runs the real binary in Socket Mode against the
// fake Slack, configured only through slack.* keys (tokens as file:), and
// kills it with SIGKILL twice during a burst of direct messages. Every
// event is stored and answered exactly once (an envelope is acknowledged
// only after its turn is stored; the fake redelivers the rest on the next
// connection and the core deduplicates); replies are at least once, with
// at most one double per DM per kill; never more than one Socket Mode
// connection is open, and Slack's limits are kept.
func TestSlackSIGKILLBurst(t *testing.T) {
	t.Parallel()
	// The burst is about SIGKILLs, not Slack's pace: at its one post a
	// second per channel the 12 replies of each DM alone took 12 s. The
	// adapter is given 300 ms through its documented key and the fake
	// demands the same (with its usual 100 ms tolerance).
	const perChannel = 300 * time.Millisecond
	srv := slacktest.NewServer(t, slacktest.Options{PerChannelInterval: perChannel})
	dsn := storetest.NewDatabase(t)
	dataDir := t.TempDir()
	env := append(slackSocketEnv(t, srv), shortLease, // the restarted serve waits for the killed one's lease
		"SILAS_SLACK_LIMITS_PER_CHANNEL_INTERVAL="+perChannel.String())
	users := []string{"U0OLIVE", "U0SAM", "U0MIA"}
	const perUser = 12
	total := perUser * len(users)
	want := map[string]string{}
	for _, u := range users {
		trust := "external"
		if u == "U0OLIVE" {
			trust = "owner"
		}
		want[u] = fmt.Sprintf("You are slack:%s with %s trust.", u, trust)
	}
	dm := func(u string) string { return "D" + u[1:] }

	s := startServer(t, dsn, dataDir, env...)
	var sent sync.WaitGroup
	sent.Add(1)
	go func() {
		defer sent.Done()
		for range perUser {
			for _, u := range users {
				srv.Send(slacktest.Msg{Channel: dm(u), User: u, Text: "whoami"})
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	stored := func() int { return dbCount(t, dsn, `SELECT count(*) FROM turns WHERE channel = 'slack'`) }
	kills := []struct{ turns, sends int }{{total / 4, 0}, {total / 2, 4}}
	for i, k := range kills {
		deadline := time.Now().Add(60 * time.Second)
		for stored() < k.turns || len(srv.Calls("chat.postMessage")) < k.sends {
			if time.Now().After(deadline) {
				t.Fatalf("kill %d: %d turns, %d posts; waiting for %+v\n%s", i+1, stored(), len(srv.Calls("chat.postMessage")), k, s.logs.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := s.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		s.waitExit(t)
		t.Logf("SIGKILL %d: %d turns stored, %d posts so far", i+1, stored(), len(srv.Calls("chat.postMessage")))
		s = startServer(t, dsn, dataDir, env...)
	}
	sent.Wait()

	deadline := time.Now().Add(90 * time.Second)
	for {
		got := 0
		for _, u := range users {
			got += len(srv.Messages(dm(u)))
		}
		pending := dbCount(t, dsn, `SELECT count(*) FROM outbox WHERE status = 'pending'`)
		pendingTurns := dbCount(t, dsn, `SELECT count(*) FROM turns WHERE status = 'pending'`)
		// Every event acknowledged (none comes again), every turn handled,
		// every job sent: no late double can come after this.
		if got >= total && srv.Pending() == 0 && pending == 0 && pendingTurns == 0 && stored() == total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d replies, %d events unacknowledged, %d jobs and %d turns pending, %d turns\n%s", got, total, srv.Pending(), pending, pendingTurns, stored(), s.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := stored(); n != total {
		t.Errorf("turns = %d, want %d", n, total)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM turns WHERE channel = 'slack' AND status = 'done'`); n != total {
		t.Errorf("turns done = %d, want %d", n, total)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM outbox WHERE channel = 'slack'`); n != total {
		t.Errorf("replies enqueued = %d, want %d", n, total)
	}
	doubles := 0
	for _, u := range users {
		n := 0
		for _, m := range srv.Messages(dm(u)) {
			if m.Text != want[u] {
				t.Errorf("%s got %q", u, m.Text)
			}
			n++
		}
		if n < perUser {
			t.Errorf("%s got %d replies, want %d", u, n, perUser)
		}
		doubles += n - perUser
	}
	if limit := len(kills) * len(users); doubles > limit {
		t.Errorf("%d replies delivered twice; at most %d can be", doubles, limit)
	}
	if m := srv.MaxLive(); m > 1 {
		t.Errorf("%d Socket Mode connections at once", m)
	}
	for _, v := range srv.Violations() {
		t.Errorf("fake Slack: %s", v)
	}
	if strings.Contains(s.logs.String(), slacktest.BotToken) {
		t.Error("the bot token appears in the log")
	}
}

// slackSocketEnv configures Socket Mode against the fake srv, tokens as
// file: (U0OLIVE is an owner, DMs open).
func slackSocketEnv(t *testing.T, srv *slacktest.Server) []string {
	t.Helper()
	dir := t.TempDir()
	bot, app := filepath.Join(dir, "bot"), filepath.Join(dir, "app")
	if err := os.WriteFile(bot, []byte(slacktest.BotToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(app, []byte(slacktest.AppToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"SILAS_SLACK_ENABLED=true", "SILAS_SLACK_BOT_TOKEN=file:" + bot, "SILAS_SLACK_APP_TOKEN=file:" + app,
		"SILAS_SLACK_BASE_URL=" + srv.URL, "SILAS_SLACK_DM_POLICY=open", "SILAS_SLACK_PING_INTERVAL=1s", "SILAS_SLACK_PING_TIMEOUT=1s",
		"SILAS_IDENTITIES_OWNERS=webchat:local,slack:U0OLIVE"}
}

// TestSlackHTTPModeServe: `silas serve` with slack.mode http answers the
// url_verification challenge, refuses unsigned and badly signed requests
// with 401 before the core, and stores a signed event once even when
// Slack retries it.
func TestSlackHTTPModeServe(t *testing.T) {
	t.Parallel()
	const secret = "0123456789abcdef0123456789abcdef"
	srv := slacktest.NewServer(t, slacktest.Options{SigningSecret: secret})
	dsn := storetest.NewDatabase(t)
	env := []string{"SILAS_SLACK_ENABLED=true", "SILAS_SLACK_MODE=http", "SILAS_SLACK_BOT_TOKEN=" + slacktest.BotToken,
		"SILAS_SLACK_SIGNING_SECRET=" + secret, "SILAS_SLACK_BASE_URL=" + srv.URL, "SILAS_SLACK_DM_POLICY=open"}
	s := startServer(t, dsn, t.TempDir(), env...)
	post := func(path string, body []byte, sign bool, ts int64, retry string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, s.base+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		// A reverse proxy's public name: the /slack/ paths are
		// authenticated by signature, not by Host.
		req.Host = "silas.example.com"
		if sign {
			req.Header.Set("X-Slack-Request-Timestamp", strconv.FormatInt(ts, 10))
			req.Header.Set("X-Slack-Signature", slacktest.Sign(secret, ts, body))
		}
		if retry != "" {
			req.Header.Set("X-Slack-Retry-Num", retry)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	now := time.Now().Unix()
	challenge := []byte(`{"type":"url_verification","token":"x","challenge":"c-123"}`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := post("/slack/events", challenge, true, now, "")
		if code == 200 && strings.TrimSpace(body) == "c-123" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("url_verification: %d %q\n%s", code, body, s.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	ev := []byte(`{"type":"event_callback","team_id":"T0TEST","event_id":"Ev9","event":{"type":"message","user":"U0SAM","text":"whoami","ts":"1700000009.000009","channel":"D0SAM","channel_type":"im"}}`)
	for _, p := range []string{"/slack/events", "/slack/interactions", "/slack/commands"} {
		if code, _ := post(p, ev, false, now, ""); code != http.StatusUnauthorized {
			t.Errorf("%s unsigned: %d; want 401", p, code)
		}
	}
	if code, _ := post("/slack/events", ev, true, now-10*60, ""); code != http.StatusUnauthorized {
		t.Errorf("stale timestamp: %d; want 401", code)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM turns`); n != 0 {
		t.Fatalf("%d turns stored from refused requests", n)
	}
	for _, retry := range []string{"", "1"} {
		if code, _ := post("/slack/events", ev, true, now, retry); code != 200 {
			t.Fatalf("signed event (retry %q): %d", retry, code)
		}
	}
	deadline = time.Now().Add(30 * time.Second)
	for len(srv.Messages("D0SAM")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no answer\n%s", s.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM turns WHERE channel = 'slack'`); n != 1 {
		t.Errorf("turns = %d; want 1", n)
	}
}
