package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

var silasBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "silas-e2e-bin")
	if err != nil {
		panic(err)
	}
	silasBin = filepath.Join(dir, "silas")
	if err := buildSilas(context.Background(), silasBin); err != nil {
		fmt.Fprintf(os.Stderr, "building silas: %v\n", err)
		os.Exit(1)
	}
	flag.Parse()
	if runsAny(flag.Lookup("test.run").Value.String(), whatsappFakeTests) {
		startWhatsAppFakeBuild()
	}
	code := pgtest.Main(m)
	stopWhatsAppFakeBuild()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runsAny reports whether a -run pattern may select one of the tests
// (its first, top-level element; an invalid one is go test's to report).
func runsAny(pattern string, tests []string) bool {
	if pattern == "" {
		return true
	}
	re, err := regexp.Compile(strings.SplitN(pattern, "/", 2)[0])
	if err != nil {
		return true
	}
	for _, name := range tests {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}

// buildSilas builds this package's binary (with the given build tags) at
// path. It goes through `go run` rather than `go build -o`: go run keeps the
// executables it links in the build cache, so when nothing changed since the
// last test run (-trimpath makes that hold across checkouts too) the binary is
// copied from there instead of linked again, which costs 8–13 CPU-seconds on
// this machine per binary. go run strips the symbol table and DWARF, as the
// tests need neither. -exec makes go run copy the executable instead of
// running it.
func buildSilas(ctx context.Context, path string, tags ...string) error {
	args := []string{"run"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	tmp := path + ".dir"
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	args = append(args, "-exec", "cp --target-directory="+tmp, ".")
	if out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	// The copy is named after the package's directory (silas).
	return os.Rename(filepath.Join(tmp, "silas"), path)
}

// server is a `silas serve` subprocess.
type server struct {
	t       *testing.T
	cmd     *exec.Cmd
	base    string // http://127.0.0.1:port
	login   string
	exited  chan struct{}
	logs    *syncBuffer
	dataDir string
	env     []string
	hc      *http.Client // signed in (the login secret is single-use)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

var loginRe = regexp.MustCompile(`Silas web chat: (http://[0-9.:]+)/#login=([A-Za-z0-9_-]+)`)

// startServer runs serve with the given extra environment on a free port.
func startServer(t *testing.T, dsn, dataDir string, extra ...string) *server {
	t.Helper()
	return startBinary(t, silasBin, dsn, dataDir, extra...)
}

// startBinary is startServer for a given build of silas.
func startBinary(t *testing.T, bin, dsn, dataDir string, extra ...string) *server {
	t.Helper()
	// The secure form listens on a fixed port by default; tests that need it
	// enable it on a free one (startServer's extra env comes last and wins).
	env := append(os.Environ(), "DATABASE_URL="+dsn, "SILAS_DATA_DIR="+dataDir, "SILAS_HTTP_LISTEN=127.0.0.1:0", "SILAS_LOG_LEVEL=debug",
		"SILAS_SECRETS_WEB_ENABLED=false")
	env = append(env, extra...)
	cmd := exec.Command(bin, "serve")
	cmd.Env = env
	stdout, _ := cmd.StdoutPipe()
	logs := &syncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, cmd: cmd, exited: make(chan struct{}), logs: logs, dataDir: dataDir, env: env}
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := loginRe.FindStringSubmatch(sc.Text()); m != nil {
				found <- m
			}
		}
	}()
	go func() { cmd.Wait(); close(s.exited) }()
	select {
	case m := <-found:
		s.base, s.login = m[1], m[2]
	case <-s.exited:
		t.Fatalf("serve exited early:\n%s", logs.String())
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("serve did not print its address:\n%s", logs.String())
	}
	t.Cleanup(func() { s.stop() })
	return s
}

func (s *server) stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
		s.t.Errorf("serve did not stop on SIGTERM within 30s")
	}
}

// waitExit waits for a process that is expected to die (failpoint).
func (s *server) waitExit(t *testing.T) {
	t.Helper()
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("server did not die at the failpoint:\n%s", s.logs.String())
	}
}

// client is a logged-in web chat WebSocket.
type client struct {
	t      *testing.T
	conn   *websocket.Conn
	frames chan map[string]any
	seen   []map[string]any
	n      int
}

func (s *server) connect(t *testing.T) *client {
	t.Helper()
	hc := s.hc
	if hc == nil {
		jar, _ := cookiejar.New(nil)
		hc = &http.Client{Jar: jar, Timeout: 10 * time.Second}
		resp, err := hc.Post(s.base+"/login", "application/json", strings.NewReader(`{"secret":"`+s.login+`"}`))
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("login: %v %v", err, resp)
		}
		resp.Body.Close()
		s.hc = hc
	}
	u, _ := url.Parse(s.base)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws://"+u.Host+"/ws", &websocket.DialOptions{HTTPClient: hc, HTTPHeader: http.Header{"Origin": {s.base}}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	conn.SetReadLimit(1 << 20)
	c := &client{t: t, conn: conn, frames: make(chan map[string]any, 256)}
	go func() {
		defer close(c.frames)
		for {
			_, b, err := conn.Read(context.Background())
			if err != nil {
				return
			}
			var f map[string]any
			if json.Unmarshal(b, &f) == nil {
				c.frames <- f
			}
		}
	}()
	t.Cleanup(func() { conn.CloseNow() })
	c.expect("hello", func(f map[string]any) bool { return f["type"] == "hello" })
	return c
}

func (c *client) write(v any) {
	c.t.Helper()
	b, _ := json.Marshal(v)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageText, b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *client) say(text string) string {
	c.n++
	id := fmt.Sprintf("m-%d-%d", time.Now().UnixNano(), c.n)
	c.write(map[string]any{"type": "message", "id": id, "text": text})
	c.expect("ack "+id, func(f map[string]any) bool { return f["type"] == "ack" && f["id"] == id })
	return id
}

func (c *client) tap(cardID, choice string) string {
	c.n++
	id := fmt.Sprintf("t-%d-%d", time.Now().UnixNano(), c.n)
	c.tapID(id, cardID, choice)
	return id
}

func (c *client) tapID(id, cardID, choice string) map[string]any {
	c.write(map[string]any{"type": "tap", "id": id, "card_id": cardID, "choice": choice})
	return c.expectNew("ack "+id, func(f map[string]any) bool { return f["type"] == "ack" && f["id"] == id })
}

// tapRefused taps and waits for the tap_result refusing that tap (its
// frame id and card id) with reason and a message containing text.
func (c *client) tapRefused(cardID, choice, reason, text string) {
	c.t.Helper()
	id := c.tap(cardID, choice)
	r := c.expectNew("tap_result "+id, func(f map[string]any) bool { return f["type"] == "tap_result" && f["id"] == id })
	if r["card_id"] != cardID || r["refused"] != true || r["reason"] != reason || !strings.Contains(fmt.Sprint(r["message"]), text) {
		c.t.Fatalf("tap_result = %v, want a refusal %s (%q) of card %s", r, reason, text, cardID)
	}
}

// expect returns the first frame (seen before or arriving) matching pred.
func (c *client) expect(what string, pred func(map[string]any) bool) map[string]any {
	c.t.Helper()
	for _, f := range c.seen {
		if pred(f) {
			return f
		}
	}
	return c.expectNew(what, pred)
}

// expectNew waits for a frame arriving from now on that matches pred.
func (c *client) expectNew(what string, pred func(map[string]any) bool) map[string]any {
	c.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatalf("connection closed while waiting for %s", what)
			}
			c.seen = append(c.seen, f)
			if pred(f) {
				return f
			}
		case <-deadline:
			b, _ := json.MarshalIndent(c.seen, "", " ")
			c.t.Fatalf("timed out waiting for %s; frames:\n%s", what, b)
		}
	}
}

func card(f map[string]any) *cards.Card {
	raw, ok := f["card"]
	if !ok {
		return nil
	}
	b, _ := json.Marshal(raw)
	var c cards.Card
	json.Unmarshal(b, &c)
	return &c
}

func (c *client) cardFor(command string, status cards.Status) *cards.Card {
	c.t.Helper()
	f := c.expect(fmt.Sprintf("card %q %s", command, status), func(f map[string]any) bool {
		cd := card(f)
		return cd != nil && cd.Command == command && cd.Status == status
	})
	return card(f)
}

func (c *client) cardStatus(id cards.ID, status cards.Status) *cards.Card {
	c.t.Helper()
	f := c.expect(fmt.Sprintf("card %s %s", id, status), func(f map[string]any) bool {
		cd := card(f)
		return cd != nil && cd.ID == id && cd.Status == status
	})
	return card(f)
}

func (c *client) textContaining(s string) {
	c.t.Helper()
	c.expect("text "+s, func(f map[string]any) bool { t, _ := f["text"].(string); return strings.Contains(t, s) })
}

func dbCount(t *testing.T, dsn, q string, args ...any) int {
	t.Helper()
	var n int
	if err := testPool(t, dsn).QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// testPools holds the tests' own connections, one small pool per database.
// Tests poll the database every few milliseconds; a connection per query was
// a third of the server's backends in a run, and a backend costs tens of
// milliseconds of CPU on a small VM (BENCHMARKS.md). The pools are left for
// pgtest's DROP DATABASE … WITH (FORCE) to end.
var testPools sync.Map // dsn → *pgxpool.Pool

func testPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	if p, ok := testPools.Load(dsn); ok {
		return p.(*pgxpool.Pool)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if prev, loaded := testPools.LoadOrStore(dsn, p); loaded {
		p.Close()
		return prev.(*pgxpool.Pool)
	}
	return p
}

func TestWebChatEndToEnd(t *testing.T) {
	t.Parallel() // a server of its own on a database of its own
	dsn := storetest.NewDatabase(t)
	s := startServer(t, dsn, t.TempDir())
	c := s.connect(t)

	// Low risk: one tap.
	c.say("/run uname -a")
	cd := c.cardFor("uname -a", cards.StatusPending)
	if cd.Choices[0].Label != "Run `uname -a`" || cd.Choices[1].Label != "Decline" || cd.Risk != cards.RiskLow || cd.Rationale == "" {
		t.Fatalf("card = %+v", cd)
	}
	first := c.tap(string(cd.ID), "approve")
	done := c.cardStatus(cd.ID, cards.StatusDone)
	if !strings.Contains(done.Outcome, "exit code 0 ✓") || !strings.Contains(done.Output, "Linux") {
		t.Fatalf("done = %+v", done)
	}

	// Replay of the same frame: acknowledged as a duplicate, nothing runs.
	if ack := c.tapID(first, string(cd.ID), "approve"); ack["duplicate"] != true {
		t.Fatalf("replayed tap ack = %v", ack)
	}
	// A second tap: "already decided", answered to that tap.
	c.tapRefused(string(cd.ID), "approve", "already_decided", "Already decided")
	// A forged card id.
	c.tapRefused("zzzzzzzzzzzzzzzzzzzzzzzzzz", "approve", "unknown_card", "Unknown card")

	// Medium risk: approve, then confirm on the same card.
	c.say("/run touch e2e-file")
	m := c.cardFor("touch e2e-file", cards.StatusPending)
	c.tap(string(m.ID), "approve")
	conf := c.cardStatus(m.ID, cards.StatusConfirming)
	if conf.Choices[0].ID != "confirm" {
		t.Fatalf("confirming = %+v", conf)
	}
	c.tap(string(m.ID), "confirm")
	c.cardStatus(m.ID, cards.StatusDone)

	if n := dbCount(t, dsn, `SELECT count(*) FROM executions`); n != 2 {
		t.Fatalf("executions = %d, want 2", n)
	}

	// Bad input gets a clear error and the connection survives.
	c.write(map[string]any{"type": "launch", "id": "x1"})
	c.expect("unknown_type error", func(f map[string]any) bool { return f["type"] == "error" && f["code"] == "unknown_type" })
	c.write(map[string]any{"type": "message", "id": "big", "text": strings.Repeat("a", 16001)})
	c.expect("too_large error", func(f map[string]any) bool { return f["type"] == "error" && f["code"] == "too_large" })
	c.conn.Write(context.Background(), websocket.MessageText, []byte("{not json"))
	c.expect("bad_frame error", func(f map[string]any) bool { return f["type"] == "error" && f["code"] == "bad_frame" })
	c.say("/whoami")
	c.textContaining("webchat:local with owner trust")
	c.say("/audit 20")
	c.textContaining("you approved `uname -a`; ran ")

	// Ops endpoints.
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get(s.base + p)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %v %v", p, err, resp)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if p == "/metrics" && !strings.Contains(string(body), "silas_turns_received_total") {
			t.Fatalf("metrics lack silas counters")
		}
	}
	// The WebSocket refuses a missing cookie and a foreign Origin.
	u, _ := url.Parse(s.base)
	if _, resp, err := websocket.Dial(context.Background(), "ws://"+u.Host+"/ws", nil); err == nil || resp.StatusCode != 401 {
		t.Fatalf("cookie-less dial = %v, %v", err, resp)
	}
	s.stop()
	if strings.Contains(s.logs.String(), s.login) {
		t.Fatal("the login secret appears in the log")
	}
}

func TestExpiredCardViaWebChat(t *testing.T) {
	t.Parallel() // a server of its own on a database of its own
	dsn := storetest.NewDatabase(t)
	s := startServer(t, dsn, t.TempDir(), "SILAS_APPROVALS_TTL=10s")
	c := s.connect(t)
	c.say("/run echo too-late")
	cd := c.cardFor("echo too-late", cards.StatusPending)
	time.Sleep(10500 * time.Millisecond)
	c.tap(string(cd.ID), "approve")
	c.cardStatus(cd.ID, cards.StatusExpired)
	if n := dbCount(t, dsn, `SELECT count(*) FROM executions`); n != 0 {
		t.Fatalf("expired card ran")
	}
}

func TestExternalIdentityCannotRun(t *testing.T) {
	t.Parallel() // a server of its own on a database of its own
	dsn := storetest.NewDatabase(t)
	s := startServer(t, dsn, t.TempDir(), "SILAS_WEBCHAT_IDENTITY=webchat:guest")
	c := s.connect(t)
	c.say("/run echo hi")
	c.textContaining("not trusted here")
	if n := dbCount(t, dsn, `SELECT count(*) FROM approvals`); n != 0 {
		t.Fatalf("external /run created an approval")
	}
}

// TestCrashExactlyOnce kills the server with SIGKILL between approval and
// execution, and after execution before the reply; after each restart the
// action has run exactly once and the result reaches the chat.
func TestCrashExactlyOnce(t *testing.T) {
	t.Parallel() // servers of their own on databases of their own
	for _, fp := range []string{"after-approve", "after-execute"} {
		t.Run(fp, func(t *testing.T) {
			t.Parallel()
			dsn := storetest.NewDatabase(t)
			data := t.TempDir()
			// The sandbox lets the action write only in its own work dir;
			// each run gets a fresh one, kept for verification: count them.
			s := startServer(t, dsn, data, "SILAS_FAILPOINT="+fp)
			c := s.connect(t)
			c.say("/run sh -c 'echo ran > ran'")
			cd := c.cardFor("sh -c 'echo ran > ran'", cards.StatusPending)
			c.tap(string(cd.ID), "approve")
			c.cardStatus(cd.ID, cards.StatusConfirming)
			// The failpoint kills the process right after the decision
			// commits, which can be before the tap's ack is written: send
			// the tap without waiting for its ack.
			c.write(map[string]any{"type": "tap", "id": "t-confirm-" + fp, "card_id": string(cd.ID), "choice": "confirm"})
			s.waitExit(t)

			s2 := startServer(t, dsn, data)
			c2 := s2.connect(t)
			done := c2.cardStatus(cd.ID, cards.StatusDone)
			if !strings.Contains(done.Outcome, "exit code 0 ✓") {
				t.Fatalf("after restart: %+v", done)
			}
			runs, _ := filepath.Glob(filepath.Join(data, "sandbox", "exec-*", "ran"))
			if len(runs) != 1 {
				t.Fatalf("the action ran %d times, want exactly 1", len(runs))
			}
			// The frame can arrive a moment before the delivery is recorded.
			deadline := time.Now().Add(10 * time.Second)
			for {
				n := dbCount(t, dsn, `SELECT count(*) FROM outbox WHERE status <> 'delivered' AND status <> 'superseded'`)
				if n == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d replies still undelivered", n)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// TestLoginLinkForWildcardListen: on a wildcard listen address (as in a
// container) the printed login link names the loopback address, which a
// browser can open, and it logs in. Checked to fail: the link was
// http://0.0.0.0:… (http://[::]:… for "[::]").
func TestLoginLinkForWildcardListen(t *testing.T) {
	t.Parallel() // a server of its own on a database of its own
	s := startServer(t, storetest.NewDatabase(t), t.TempDir(), "SILAS_HTTP_LISTEN=0.0.0.0:0")
	if !strings.HasPrefix(s.base, "http://127.0.0.1:") {
		t.Fatalf("login link base %q; want http://127.0.0.1:<port>", s.base)
	}
	c := s.connect(t)
	c.say("/whoami")
	c.textContaining("webchat:local")
}
