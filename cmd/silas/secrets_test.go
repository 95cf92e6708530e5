package main

// Secrets end to end, on the real binary: /secret in the chat, the value
// typed into the HTTPS secure form (in headless Chromium, or with a Go
// client when there is no browser), /run --secret, a restart, the secrets
// CLI, and a canary value searched for everywhere Silas writes: the logs of
// every process, every chat frame, the audit log, every database table and
// every file under data_dir. It must appear nowhere.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"html"
	"io"
	"io/fs"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/browsertest"
	"github.com/silas-gateway/silas/internal/storetest"
)

const (
	secretName = "demo_key"
	// secretRun prints the secret; the output must show it redacted.
	secretRun = `--secret demo_key sh -c 'echo "v=$DEMO_KEY"'`
	// credentialNotice is the start of the engine's answer to a message
	// that carried a credential.
	credentialNotice = "I removed what looked like a credential"
)

// freePort returns a loopback port for the secure form, which must know
// its address (the card's link) before serve starts, so it cannot listen
// on :0 itself. A port from :0 would be a kernel ephemeral port: between
// this probe and serve's bind, any other test's :0 listener or outgoing
// connection could take it. So the port comes from below the ephemeral
// range (ip_local_port_range), which the kernel never hands out, and no
// port is handed out twice in this process.
func freePort(t *testing.T) int {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 2048 {
				low = n
			}
		}
	}
	freePorts.mu.Lock()
	defer freePorts.mu.Unlock()
	for range 1000 {
		port := low/2 + mrand.IntN(low/2)
		if freePorts.given[port] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // someone's: try another
		}
		ln.Close()
		freePorts.given[port] = true
		return port
	}
	t.Fatal("no free loopback port below the ephemeral range")
	return 0
}

var freePorts = struct {
	mu    sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

// secretsWebEnv enables the secure form (self-signed, loopback) on a free
// port and returns the extra environment and the form's base URL.
func secretsWebEnv(t *testing.T) ([]string, string) {
	t.Helper()
	base := fmt.Sprintf("https://127.0.0.1:%d", freePort(t))
	return []string{"SILAS_SECRETS_WEB_ENABLED=true", "SILAS_SECRETS_WEB_LISTEN=" + strings.TrimPrefix(base, "https://"),
		"SILAS_SECRETS_WEB_PUBLIC_URL=" + base}, base
}

// formEnvBase is the form's public URL in an environment from secretsWebEnv.
func formEnvBase(env []string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "SILAS_SECRETS_WEB_PUBLIC_URL="); ok {
			return v
		}
	}
	return ""
}

// randomAlnum returns n random characters from [A-Za-z0-9].
func randomAlnum(n int) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// newCanary is a unique value that no part of Silas can produce by itself.
func newCanary() string { return "cAnArY-" + randomAlnum(24) }

// newGitHubToken looks like a classic GitHub token (ghp_ + 36).
func newGitHubToken() string { return "ghp_" + randomAlnum(36) }

// formClient is an HTTPS client that trusts exactly the form's self-signed
// certificate (data_dir/secrets-web/cert.pem) and keeps cookies.
func formClient(t *testing.T, dataDir string) *http.Client {
	t.Helper()
	pemBytes, err := os.ReadFile(filepath.Join(dataDir, "secrets-web", "cert.pem"))
	if err != nil {
		t.Fatalf("the self-signed certificate: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		t.Fatal("cert.pem holds no certificate")
	}
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

var (
	csrfFieldRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	tFieldRe    = regexp.MustCompile(`name="t" value="([^"]+)"`)
)

// submitForm does what a browser does with a link: GET the form (CSRF
// cookie and field), then POST the value. It returns the POST's status and
// page.
func submitForm(t *testing.T, hc *http.Client, link, value string) (int, string) {
	t.Helper()
	resp, err := hc.Get(link)
	if err != nil {
		t.Fatalf("GET form: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET form: %d\n%s", resp.StatusCode, body)
	}
	csrf, tok := csrfFieldRe.FindSubmatch(body), tFieldRe.FindSubmatch(body)
	if csrf == nil || tok == nil {
		t.Fatalf("the form has no csrf or t field:\n%s", body)
	}
	u, _ := url.Parse(link)
	form := url.Values{"t": {html.UnescapeString(string(tok[1]))}, "csrf": {html.UnescapeString(string(csrf[1]))}, "value": {value}}
	resp, err = hc.PostForm(u.Scheme+"://"+u.Host+u.Path, form)
	if err != nil {
		t.Fatalf("POST form: %v", err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(body)
}

// leakCheck collects every place Silas wrote to, and asserts that none of
// them holds a value that must never be written.
type leakCheck struct {
	t      *testing.T
	values map[string]string // what → value that must appear nowhere
	// allowed lists, per value, the places (name prefixes) where it may
	// appear.
	allowed map[string][]string
	places  []place
	// spans, when set, is the collector serve exported its traces to:
	// they are searched too (issue 29).
	spans *otlpSink
}

type place struct{ where, text string }

func (l *leakCheck) add(where, text string) { l.places = append(l.places, place{where, text}) }

// contains reports whether where (a prefix of place names) holds s: the
// positive controls that prove the search reads real content.
func (l *leakCheck) contains(where, s string) bool {
	for _, p := range l.places {
		if strings.HasPrefix(p.where, where) && strings.Contains(p.text, s) {
			return true
		}
	}
	return false
}

// encodings are the forms a leaked value could take in text: plain, hex,
// and base64/base64url at each of the three byte alignments it can have
// inside a longer encoding (only the part that depends on the value alone).
func encodings(v string) map[string]string {
	m := map[string]string{"plain": v, "hex": hex.EncodeToString([]byte(v))}
	for j := 0; j < 3; j++ {
		b := []byte(v[j:])
		b = b[:len(b)/3*3]
		m[fmt.Sprintf("base64@%d", j)] = base64.StdEncoding.EncodeToString(b)
		m[fmt.Sprintf("base64url@%d", j)] = base64.URLEncoding.EncodeToString(b)
	}
	return m
}

func (l *leakCheck) run() {
	l.t.Helper()
	total := 0
	for _, p := range l.places {
		total += len(p.text)
		lower := strings.ToLower(p.text)
		for what, v := range l.values {
			if slices.ContainsFunc(l.allowed[what], func(prefix string) bool { return strings.HasPrefix(p.where, prefix) }) {
				continue
			}
			for enc, s := range encodings(v) {
				hay := p.text
				if enc == "hex" {
					hay, s = lower, strings.ToLower(s)
				}
				if i := strings.Index(hay, s); i >= 0 {
					l.t.Errorf("%s (%s) appears in %s: …%s…", what, enc, p.where, hay[max(0, i-200):min(len(hay), i+len(s)+80)])
				}
			}
		}
	}
	l.t.Logf("searched %d places, %d bytes, for %d values", len(l.places), total, len(l.values))
}

// addDatabase adds a text dump of every table in the public schema.
func (l *leakCheck) addDatabase(dsn string) {
	l.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		l.t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name`)
	if err != nil {
		l.t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) == 0 {
		l.t.Fatalf("tables: %v %v", tables, err)
	}
	for _, tb := range tables {
		rows, err := conn.Query(ctx, `SELECT t::text FROM public.`+pgx.Identifier{tb}.Sanitize()+` t`)
		if err != nil {
			l.t.Fatalf("dump %s: %v", tb, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			l.t.Fatalf("dump %s: %v", tb, err)
		}
		l.add("table "+tb, strings.Join(lines, "\n"))
	}
}

// addFiles adds every regular file under dir.
func (l *leakCheck) addFiles(dir string) {
	l.t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			l.add("file "+p, string(b))
		}
		return nil
	})
	if err != nil {
		l.t.Fatal(err)
	}
}

// addLinkToken registers the link token of a secure-input card: a capability
// to submit a value, which the chat carries but no log, audit entry or file
// may. The outbox stores the card it was delivered in, link included (only
// the token's sha256 is in secret_requests).
func (l *leakCheck) addLinkToken(link string) {
	u, err := url.Parse(link)
	if err != nil || u.Query().Get("t") == "" {
		l.t.Fatalf("link %q has no token", link)
	}
	l.values["the link token"] = u.Query().Get("t")
	l.allowed["the link token"] = []string{"frames", "table outbox"}
}

func framesText(frames []map[string]any) string {
	var b strings.Builder
	for _, f := range frames {
		j, _ := json.Marshal(f)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// drain reads the frames that arrive until none came for quiet.
func (c *client) drain(quiet time.Duration) {
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				return
			}
			c.seen = append(c.seen, f)
		case <-time.After(quiet):
			return
		}
	}
}

// runSecretCommand sends /run --secret …, approves and confirms (the
// command is a shell script: high risk) and returns the final card.
func runSecretCommand(t *testing.T, c *client, final cards.Status) *cards.Card {
	t.Helper()
	c.say("/run " + secretRun)
	f := c.expectNew("pending /run --secret card", func(f map[string]any) bool {
		cd := card(f)
		return cd != nil && cd.Status == cards.StatusPending && strings.Contains(cd.Command, "DEMO_KEY")
	})
	cd := card(f)
	if cd.Risk != cards.RiskHigh {
		t.Errorf("risk of %q = %s, want high", cd.Command, cd.Risk)
	}
	if !slices.Contains(cd.AffectedItems, "receives secret: "+secretName) {
		t.Errorf("the card does not say which secret the command receives: %+v", cd.AffectedItems)
	}
	c.tap(string(cd.ID), "approve")
	c.cardStatus(cd.ID, cards.StatusConfirming)
	c.tap(string(cd.ID), "confirm")
	return c.cardStatus(cd.ID, final)
}

// afterStored is the part both variants share once demo_key is stored and
// was used, and the chat was sent a credential: a restart, the CLI
// (list, delete, list), a refused /run --secret, then the search for the
// canary and the credential everywhere.
func afterStored(t *testing.T, dsn, dataDir string, formEnv []string, s1 *server, leaks *leakCheck) {
	t.Helper()
	s1.stop()
	s2 := startServer(t, dsn, dataDir, formEnv...)
	c2 := s2.connect(t)
	c2.say("/secrets")
	c2.textContaining("• " + secretName + " — stored ")

	code, out, errOut := silas(t, dsn, "secrets", "list")
	leaks.add("secrets list", out+errOut)
	if code != 0 || !strings.Contains(out, secretName) || !strings.Contains(out, "LAST USED") {
		t.Fatalf("secrets list = %d\n%s%s", code, out, errOut)
	}
	if line := lineWith(out, secretName); strings.HasSuffix(strings.TrimSpace(line), "never") {
		t.Errorf("secrets list says %s was never used after /run --secret: %q", secretName, line)
	}
	code, out, errOut = silas(t, dsn, "secrets", "list", "--json")
	leaks.add("secrets list --json", out+errOut)
	var info map[string]any
	if code != 0 || json.Unmarshal([]byte(lineWith(out, secretName)), &info) != nil || info["name"] != secretName || info["last_used_at"] == nil {
		t.Fatalf("secrets list --json = %d\n%s%s", code, out, errOut)
	}
	// In the gateway's data_dir, as an operator on its host: the deletion's
	// audit entry carries the MAC of the gateway's entry key (a CLI with a
	// data_dir of its own has another key, and verify would name it).
	code, out, errOut = silasIn(t, dsn, dataDir, "secrets", "delete", secretName)
	leaks.add("secrets delete", out+errOut)
	if code != 0 || !strings.Contains(out, "deleted secret "+secretName) {
		t.Fatalf("secrets delete = %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = silasIn(t, dsn, dataDir, "secrets", "delete", secretName)
	leaks.add("secrets delete again", out+errOut)
	if code != 1 || !strings.Contains(errOut, "there is no secret named "+secretName) {
		t.Fatalf("second secrets delete = %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = silas(t, dsn, "secrets", "list")
	leaks.add("secrets list after delete", out+errOut)
	if code != 0 || strings.Contains(out, secretName) || !strings.Contains(out, "No secrets stored") {
		t.Fatalf("secrets list after delete = %d\n%s%s", code, out, errOut)
	}

	// An approved action that declares the deleted secret is refused, and
	// Silas asks for the secret with a secure-input card.
	refused := runSecretCommand(t, c2, cards.StatusRefused)
	if !strings.Contains(refused.Outcome, "a secure-form link to store it was sent") {
		t.Errorf("refused outcome = %q", refused.Outcome)
	}
	ask := card(c2.expect("secure-input card asking again for "+secretName, func(f map[string]any) bool {
		cd := card(f)
		return cd != nil && cd.Kind == cards.KindSecureInput && strings.Contains(cd.Intent, secretName) && cd.Link != nil
	}))
	if !strings.HasPrefix(ask.Link.URL, formEnvBase(formEnv)+"/secrets/") {
		t.Errorf("secure-input card link = %q", ask.Link.URL)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM executions WHERE status = 'refused'`); n != 1 {
		t.Errorf("refused executions = %d, want 1", n)
	}

	code, out, errOut = silas(t, dsn, "audit", "tail", "-n", "10000", "--json")
	if code != 0 {
		t.Fatalf("audit tail = %d\n%s", code, errOut)
	}
	leaks.add("audit tail", out+errOut)
	for _, kind := range []string{"secret.requested", "secret.stored", "secret.deleted"} {
		if !strings.Contains(out, `"kind":"`+kind+`"`) {
			t.Errorf("the audit log has no %s entry", kind)
		}
	}
	if !strings.Contains(out, `"secrets":["`+secretName+`"]`) {
		t.Errorf("the audit log does not record the use of %s by an execution", secretName)
	}
	var deleted bool
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var e struct {
			Kind, Actor string
			Data        map[string]any
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("audit tail --json line %q: %v", l, err)
		}
		if e.Kind == "secret.deleted" && e.Actor == string(operatorActor) && e.Data["name"] == secretName {
			deleted = true
		}
	}
	if !deleted {
		t.Errorf("no secret.deleted entry by the operator naming %s:\n%s", secretName, out)
	}
	// In serve's data_dir: its audit.pub checks the signed checkpoints.
	if code, out, _ := silasIn(t, dsn, dataDir, "audit", "verify"); code != 0 {
		t.Errorf("audit verify = %d: %s", code, out)
	}

	c2.drain(300 * time.Millisecond)
	s2.stop()
	leaks.add("log of the restarted server", s2.logs.String())
	leaks.add("frames after the restart", framesText(c2.seen))
	leaks.add("log of the first server", s1.logs.String())
	if leaks.spans != nil {
		// Both servers stopped: each exported what it had queued. Spans
		// carry ids, names and counts: neither the command nor the chat's
		// text (the canary and the token are searched with the rest).
		exported := leaks.spans.String()
		leaks.add("exported spans", exported)
		for _, never := range []string{secretRun, "here is my token", "DEMO_KEY"} {
			if strings.Contains(exported, never) {
				t.Errorf("an exported span carries %q", never)
			}
		}
	}
	leaks.addDatabase(dsn)
	leaks.addFiles(dataDir)

	// Positive controls: the search reads real content.
	for _, want := range []struct{ where, s string }{
		{"log of the first server", "secure form: secret stored"},
		{"exported spans", "silas.sandbox"},
		{"exported spans", "silas.approval_id"},
		{"exported spans", "db.system.name"},
		{"log of the first server", "name=" + secretName},
		{"audit tail", "secret.stored"},
		{"table secret_requests", secretName},
		{"table audit_log", "secret.deleted"},
		{"frames before the restart", "stored ✓"},
		{"frames before the restart", "[redacted secret]"},
		{"frames before the restart", credentialNotice},
		{"frames after the restart", "a secure-form link to store it was sent"},
		{"file " + filepath.Join(dataDir, "secrets-web"), "CERTIFICATE"},
	} {
		if want.where == "exported spans" && leaks.spans == nil {
			continue
		}
		if !leaks.contains(want.where, want.s) {
			t.Errorf("control: %s does not contain %q", want.where, want.s)
		}
	}
	leaks.run()
}

func lineWith(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// TestSecretsCanary runs without a browser: the chat over the WebSocket,
// the form with a Go HTTPS client.
func TestSecretsCanary(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
	dataDir := t.TempDir()
	formEnv, formBase := secretsWebEnv(t)
	// Traces on, to a collector of the test's own, searched like the rest.
	sink := newOTLPSink(t)
	formEnv = append(formEnv, sink.env()...)
	s := startServer(t, dsn, dataDir, formEnv...)
	c := s.connect(t)
	canary, ghp := newCanary(), newGitHubToken()
	leaks := &leakCheck{t: t, values: map[string]string{"the canary": canary, "the GitHub token": ghp}, allowed: map[string][]string{}, spans: sink}

	c.say("/secret " + secretName)
	f := c.expect("secure-input card", func(f map[string]any) bool {
		cd := card(f)
		return cd != nil && cd.Kind == cards.KindSecureInput && cd.Status == cards.StatusPending
	})
	in := card(f)
	if in.Link == nil || !strings.HasPrefix(in.Link.URL, formBase+"/secrets/"+string(in.ID)+"?t=") {
		t.Fatalf("secure-input card link = %+v, want %s/secrets/%s?t=…", in.Link, formBase, in.ID)
	}
	link := in.Link.URL
	leaks.addLinkToken(link)

	hc := formClient(t, dataDir)
	// Wrong token: the same 404 as an unknown ref.
	if status, _ := getPage(t, hc, formBase+"/secrets/"+string(in.ID)+"?t="+randomAlnum(43)); status != http.StatusNotFound {
		t.Fatalf("wrong token: %d, want 404", status)
	}
	status, page := submitForm(t, hc, link, canary)
	if status != http.StatusOK || !strings.Contains(page, "Saved securely as "+secretName) {
		t.Fatalf("POST = %d\n%s", status, page)
	}
	if strings.Contains(page, canary) {
		t.Fatal("the confirmation page echoes the value")
	}
	leaks.add("form pages", page)
	// The link works once.
	if status, page := getPage(t, hc, link); status != http.StatusConflict {
		t.Fatalf("second use of the link = %d\n%s", status, page)
	}

	done := c.cardStatus(in.ID, cards.StatusDone)
	if done.Outcome != "`"+secretName+"` stored ✓" {
		t.Errorf("card after storing = %+v", done)
	}

	// The card hides the output of a run that received the secret; /output
	// shows it, redacted.
	ran := runSecretCommand(t, c, cards.StatusDone)
	if ran.Output != "" || ran.OutputRef == "" || !strings.Contains(ran.Outcome, "Output hidden because this action received secret "+secretName) {
		t.Errorf("card after the run = %+v, want its output hidden", ran)
	}
	// The output may hold the secret in a form redaction misses: /output
	// sends a card, and the owner's tap shows it (issue 22 point 1).
	c.say("/output " + ran.OutputRef)
	ask := card(c.expectNew("the card that asks to show the output", func(f map[string]any) bool {
		cd := card(f)
		return cd != nil && cd.Kind == cards.KindInfo && cd.Status == cards.StatusPending && strings.Contains(cd.Intent, ran.OutputRef)
	}))
	if !strings.Contains(ask.Intent, "may contain secret "+secretName+" in some encoding") {
		t.Errorf("reveal card = %+v", ask)
	}
	c.tap(string(ask.ID), "show")
	c.textContaining("(secret values redacted):\nv=[redacted secret]")

	c.say("here is my token " + ghp + " please keep it")
	c.textContaining(credentialNotice)
	c.drain(300 * time.Millisecond)
	leaks.add("frames before the restart", framesText(c.seen))

	afterStored(t, dsn, dataDir, formEnv, s, leaks)
}

// getPage GETs u and returns the status and the page.
func getPage(t *testing.T, hc *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := hc.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// frameLog keeps the WebSocket frames the chat page received.
type frameLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *frameLog) listen(ev any) {
	if ev, ok := ev.(*network.EventWebSocketFrameReceived); ok && ev.Response != nil {
		l.mu.Lock()
		l.b.Write(ev.Response.PayloadData)
		l.b.WriteByte('\n')
		l.mu.Unlock()
	}
}

func (l *frameLog) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// browserSend types text into the chat and sends it.
func browserSend(t *testing.T, ctx context.Context, text string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.SendKeys(testid("input"), text), chromedp.Click(testid("send"))); err != nil {
		t.Fatalf("send %q: %v", text, err)
	}
}

// TestBrowserSecrets is the whole flow as a user does it, in headless
// Chromium: the link on the card opens the secure form, the value is typed
// into its password field.
func TestBrowserSecrets(t *testing.T) {
	t.Parallel()
	// The browser first: without one the test skips before starting a
	// database and a server. The form's certificate is self-signed.
	bctx := browsertest.NewWith(t, browsertest.IgnoreCertificateErrors())
	dsn := storetest.NewDatabase(t)
	dataDir := t.TempDir()
	formEnv, formBase := secretsWebEnv(t)
	s := startServer(t, dsn, dataDir, formEnv...)
	ctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
	defer cancel()
	canary, ghp := newCanary(), newGitHubToken()
	leaks := &leakCheck{t: t, values: map[string]string{"the canary": canary, "the GitHub token": ghp}, allowed: map[string][]string{}}

	frames := &frameLog{}
	if err := chromedp.Listen(ctx, frames.listen); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(s.base+"/#login="+s.login)); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	browserWait(t, ctx, "connected", `document.querySelector('[data-testid=conn]').dataset.state === 'connected'`)

	browserSend(t, ctx, "/secret "+secretName)
	ref := browserPoll(t, ctx, "secure-input card", `(() => {
		const c = document.querySelector('[data-testid=card][data-kind=secure_input][data-status=pending]');
		return c && c.querySelector('a[data-testid=link]') ? c.dataset.cardId : '';
	})()`)
	link := browserEval[string](t, ctx, `document.querySelector('[data-card-id=`+js(ref)+`] a[data-testid=link]').href`)
	if !strings.HasPrefix(link, formBase+"/secrets/"+ref+"?t=") {
		t.Fatalf("link = %q, want %s/secrets/%s?t=…", link, formBase, ref)
	}
	leaks.addLinkToken(link)

	// The form, in a tab of its own, as target=_blank opens it.
	fctx, fcancel := chromedp.NewContext(ctx)
	defer fcancel()
	resp, err := chromedp.Run(fctx, chromedp.NavigateResponse(link))
	if err != nil || resp.Status != http.StatusOK {
		t.Fatalf("open the form: %v %v", err, resp)
	}
	if typ := browserEval[string](t, fctx, `document.getElementById('value').type`); typ != "password" {
		t.Errorf("value field type = %q, want password", typ)
	}
	if err := chromedp.Do(fctx, chromedp.SendKeys(chromedp.ID("value"), canary)); err != nil {
		t.Fatalf("type the value: %v", err)
	}
	resp, err = chromedp.RunResponse(fctx, chromedp.Click(chromedp.CSS(`button[type=submit]`)))
	if err != nil || resp.Status != http.StatusOK {
		t.Fatalf("submit the form: %v %v", err, resp)
	}
	confirmation := browserEval[string](t, fctx, `document.documentElement.outerHTML`)
	if !strings.Contains(confirmation, "Saved securely as "+secretName) {
		t.Errorf("confirmation page:\n%s", confirmation)
	}
	if strings.Contains(confirmation, canary) {
		t.Error("the confirmation page echoes the value")
	}
	if n := browserEval[int](t, fctx, `document.querySelectorAll('input').length`); n != 0 {
		t.Errorf("the confirmation page has %d input fields", n)
	}
	leaks.add("form pages", confirmation)
	if errs := browsertest.JSErrors(fctx); len(errs) > 0 {
		t.Errorf("form page errors: %q", errs)
	}
	fcancel()

	// Back in the chat: the same card now says stored.
	browserWait(t, ctx, "card stored", `document.querySelector('[data-card-id=`+js(ref)+`][data-status=done]')`)
	if out := cardState(t, ctx, ref)["outcome"]; out != "`"+secretName+"` stored ✓" {
		t.Errorf("card outcome = %q", out)
	}
	if n := browserEval[int](t, ctx, `document.querySelectorAll('[data-card-id=`+js(ref)+`] a[data-testid=link]').length`); n != 0 {
		t.Errorf("the stored card still shows its link")
	}

	// Use it: approve, confirm (medium risk), redacted output.
	browserSend(t, ctx, "/run "+secretRun)
	run := browserPoll(t, ctx, "pending /run --secret card", `(() => {
		const c = [...document.querySelectorAll('[data-testid=card][data-status=pending]')]
			.find(c => (c.querySelector('[data-testid=command]')?.textContent || '').includes('DEMO_KEY'));
		return c ? c.dataset.cardId : '';
	})()`)
	if r := cardState(t, ctx, run)["risk"]; r != "high" {
		t.Errorf("risk = %v, want high", r)
	}
	if txt := browserEval[string](t, ctx, `document.querySelector('[data-card-id=`+js(run)+`]').innerText`); !strings.Contains(txt, "receives secret: "+secretName) {
		t.Errorf("the card does not show which secret the command receives:\n%s", txt)
	}
	if err := chromedp.Do(ctx, chromedp.Click(cardSel(run, "choice-approve"))); err != nil {
		t.Fatalf("click approve: %v", err)
	}
	browserWait(t, ctx, "confirming", `document.querySelector('[data-card-id=`+js(run)+`][data-status=confirming] [data-testid=choice-confirm]:not([disabled])')`)
	if err := chromedp.Do(ctx, chromedp.Click(cardSel(run, "choice-confirm"))); err != nil {
		t.Fatalf("click confirm: %v", err)
	}
	browserWait(t, ctx, "run done", `document.querySelector('[data-testid=card][data-card-id=`+js(run)+`][data-status=done]')`)
	st := cardState(t, ctx, run)
	if out, _ := st["output"].(string); out != "" || !strings.Contains(fmt.Sprint(st["outcome"]), "Output hidden because this action received secret "+secretName) {
		t.Errorf("card after the run = %v, want its output hidden", st)
	}
	browserSend(t, ctx, "/output "+run)
	ask := browserPoll(t, ctx, "the card that asks to show the output", `(() => {
		const c = [...document.querySelectorAll('[data-testid=card][data-status=pending]')]
			.find(c => c.innerText.includes('may contain secret `+secretName+` in some encoding'));
		return c ? c.dataset.cardId : '';
	})()`)
	if err := chromedp.Do(ctx, chromedp.Click(cardSel(ask, "choice-show"))); err != nil {
		t.Fatalf("click show: %v", err)
	}
	browserWait(t, ctx, "output shown", `document.body.innerText.includes('v=[redacted secret]')`)

	// A credential typed into the chat.
	browserSend(t, ctx, "here is my token "+ghp+" please keep it")
	browserWait(t, ctx, "credential notice", `document.body.innerText.includes(`+js(credentialNotice)+`)`)

	if errs := browsertest.JSErrors(bctx); len(errs) > 0 {
		t.Errorf("chat page errors: %q", errs)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Logf("leaving the page: %v", err)
	}
	leaks.add("frames before the restart", frames.String())

	afterStored(t, dsn, dataDir, formEnv, s, leaks)
}

// TestSecretsWebStandalone: `silas secrets-web` serves the form alone,
// stores a value for a pending request with the same data key a gateway
// uses, and enqueues no card update.
func TestSecretsWebStandalone(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
	ctx := t.Context()
	st, err := store.Open(ctx, dsn, store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	req, token, err := secrets.NewRequest(secrets.Request{Name: "standalone_key", Requester: "webchat:local", Conversation: "webchat:local",
		Channel: "webchat"}, time.Now(), 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		return tx.InsertSecretRequest(ctx, req)
	}); err != nil {
		t.Fatal(err)
	}

	dataDir := t.TempDir()
	formEnv, formBase := secretsWebEnv(t)
	cmd := exec.Command(silasBin, "secrets-web")
	cmd.Env = append(append(os.Environ(), "DATABASE_URL="+dsn, "SILAS_DATA_DIR="+dataDir, "SILAS_CONFIG=", "SILAS_LOG_LEVEL=debug",
		"SILAS_SECRETS_WEB_ENABLED=false"), formEnv...)
	stdout, _ := cmd.StdoutPipe()
	logs := &syncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	lines := make(chan string, 16)
	var printed bytes.Buffer
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var banner string
	for banner == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("secrets-web closed its output:\n%s", logs.String())
			}
			printed.WriteString(l + "\n")
			if strings.HasPrefix(l, "Secure form for credentials: ") {
				banner = l
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("secrets-web did not start:\n%s", logs.String())
		}
	}
	// The printed fingerprint is the certificate's.
	pemBytes, err := os.ReadFile(filepath.Join(dataDir, "secrets-web", "cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		t.Fatal("cert.pem holds no PEM block")
	}
	sum := sha256.Sum256(block.Bytes)
	if !strings.Contains(banner, formBase) || !strings.Contains(strings.ReplaceAll(banner, ":", ""), strings.ToUpper(hex.EncodeToString(sum[:]))) {
		t.Errorf("banner = %q, want %s and the certificate's SHA-256 fingerprint", banner, formBase)
	}

	value := newCanary()
	hc := formClient(t, dataDir)
	status, page := submitForm(t, hc, formBase+"/secrets/"+req.Ref+"?t="+url.QueryEscape(token), value)
	if status != http.StatusOK || !strings.Contains(page, "Saved securely as standalone_key") || strings.Contains(page, value) {
		t.Fatalf("POST = %d\n%s", status, page)
	}

	// Stored, sealed with the data key a gateway on this data_dir uses.
	key, created, err := secrets.LoadOrCreateKey(filepath.Join(dataDir, "keys", "secrets.key"))
	if err != nil || created {
		t.Fatalf("data key: created=%v %v", created, err)
	}
	sealer, err := secrets.NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	got, err := secrets.Reveal(ctx, st, sealer, "standalone_key")
	if err != nil || string(got) != value {
		t.Fatalf("reveal = %v (matches: %v)", err, string(got) == value)
	}
	// No engine: nothing for the chat was enqueued.
	if n := dbCount(t, dsn, `SELECT count(*) FROM outbox`); n != 0 {
		t.Errorf("outbox rows = %d, want 0 (secrets-web enqueues no card update)", n)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM audit_log WHERE kind = 'secret.stored'`); n != 1 {
		t.Errorf("secret.stored entries = %d, want 1", n)
	}

	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("secrets-web exited with %v:\n%s", err, logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("secrets-web did not stop on SIGTERM:\n%s", logs.String())
	}
	for l := range lines {
		printed.WriteString(l + "\n")
	}
	for where, text := range map[string]string{"log": logs.String(), "output": printed.String()} {
		if strings.Contains(text, value) || strings.Contains(text, token) {
			t.Errorf("the value or the link token appears in secrets-web's %s", where)
		}
	}
	if !strings.Contains(logs.String(), "secure form: secret stored") {
		t.Errorf("log lacks the stored line:\n%s", logs.String())
	}
}

// TestSecretsCLIUsage: --help on each new command, usage errors.
func TestSecretsCLIUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"secrets", "--help"}, 0, "secrets list | secrets delete <name>"},
		{[]string{"secrets"}, 2, "never values"},
		{[]string{"secrets", "list", "--help"}, 0, "Values are never shown"},
		{[]string{"secrets", "delete", "--help"}, 0, "audit log"},
		{[]string{"secrets", "delete"}, 2, "Usage: silas secrets delete <name>"},
		{[]string{"secrets", "delete", "Bad Name!"}, 1, "silas secrets:"},
		{[]string{"secrets-web", "--help"}, 0, "does NOT update the chat"},
		{[]string{"secrets-web", "extra"}, 2, "Usage: silas secrets-web"},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), tt.args, &out, &errOut)
		if all := out.String() + errOut.String(); code != tt.code || !strings.Contains(all, tt.want) {
			t.Errorf("run(%q) = %d, output:\n%s\nwant %d and %q", tt.args, code, all, tt.code, tt.want)
		}
	}
}
