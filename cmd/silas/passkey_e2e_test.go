package main

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/internal/softauthn"
	"github.com/silas-gateway/silas/internal/storetest"
)

// passkeyPolicy makes `touch` irreversible: it runs only after a passkey
// step-up (and leaves a marker in the execution's work directory).
const passkeyPolicy = `policy:
  rules:
    - name: wipe
      tool: shell
      match: '^touch '
      decision: auth_required
      risk: irreversible
`

var (
	pkAttrRe    = regexp.MustCompile(`data-(token|csrf)="([^"]*)"`)
	pkOptionsRe = regexp.MustCompile(`(?s)<script type="application/json" id="options">(.*?)</script>`)
	pkLinkRe    = regexp.MustCompile(`https://localhost:[0-9]+/passkey/enroll/[a-z2-7]+\?t=[A-Za-z0-9_%-]+`)
)

// passkeyPage does what the page's script does with a software
// authenticator: GET the page (CSRF cookie, tokens, options), answer with
// register or assert, POST the JSON. It returns the POST's status and
// answer.
func passkeyPage(t *testing.T, hc *http.Client, link string, answer func(opts []byte) ([]byte, error)) (int, map[string]any) {
	t.Helper()
	resp, err := hc.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d\n%s", link, resp.StatusCode, body)
	}
	fields := map[string]string{}
	for _, m := range pkAttrRe.FindAllStringSubmatch(body, -1) {
		fields[m[1]] = html.UnescapeString(m[2])
	}
	m := pkOptionsRe.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no options on the page:\n%s", body)
	}
	cred, err := answer([]byte(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	post, _ := json.Marshal(map[string]any{"t": fields["token"], "csrf": fields["csrf"], "credential": json.RawMessage(cred)})
	u, _ := url.Parse(link)
	req, _ := http.NewRequest(http.MethodPost, u.Scheme+"://"+u.Host+u.Path, strings.NewReader(string(post)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", u.Scheme+"://"+u.Host)
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(readAll(t, resp)), &out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String()
}

// TestPasskeyStepUpE2E runs the binary: an irreversible card is refused
// to an owner without a passkey; `silas passkey add` prints a link that
// registers one; the card's tap then sends a "Confirm with passkey" link,
// and only the assertion on that page runs the action — once, verified,
// audited with approval_strength passkey. `passkey list` and `remove` and
// doctor see it.
func TestPasskeyStepUpE2E(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
	data := t.TempDir()
	cfgFile := filepath.Join(t.TempDir(), "silas.yaml")
	if err := os.WriteFile(cfgFile, []byte(passkeyPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	base := fmt.Sprintf("https://localhost:%d", port)
	s := startServer(t, dsn, data, "SILAS_CONFIG="+cfgFile, "SILAS_SECRETS_WEB_ENABLED=true",
		fmt.Sprintf("SILAS_SECRETS_WEB_LISTEN=127.0.0.1:%d", port), "SILAS_SECRETS_WEB_PUBLIC_URL="+base)
	c := s.connect(t)

	c.say("/run touch gone")
	cd := c.cardFor("touch gone", cards.StatusPending)
	if cd.Risk != cards.RiskIrreversible {
		t.Fatalf("risk = %s, want irreversible", cd.Risk)
	}
	c.tapRefused(string(cd.ID), "approve", "no_passkey", "silas passkey add")

	out := s.silasCLI(t, "passkey", "add", "--name", "e2e-key")
	link := pkLinkRe.FindString(out)
	if link == "" || !strings.HasPrefix(link, base) {
		t.Fatalf("passkey add printed no enrollment link on %s:\n%s", base, out)
	}
	hc := formClient(t, data)
	auth, err := softauthn.New(base)
	if err != nil {
		t.Fatal(err)
	}
	if st, ans := passkeyPage(t, hc, link, auth.Register); st != http.StatusOK || ans["ok"] != true {
		t.Fatalf("registration: %d %v", st, ans)
	}
	if out := s.silasCLI(t, "passkey", "list"); !strings.Contains(out, "webchat:local") || !strings.Contains(out, "e2e-key") {
		t.Fatalf("passkey list:\n%s", out)
	}

	c.tap(string(cd.ID), "approve")
	conf := c.cardStatus(cd.ID, cards.StatusConfirming)
	if conf.Link == nil || conf.Link.Label != "Confirm with passkey" || !strings.HasPrefix(conf.Link.URL, base+"/passkey/stepup/") {
		t.Fatalf("confirming card = %+v, want a step-up link", conf)
	}
	c.tapRefused(string(cd.ID), "confirm", "no_passkey", "passkey")
	// From opening the link to the verified result on the card (issue 29:
	// ≤ 10 s; logged for BENCHMARKS.md, never asserted).
	start := time.Now()
	if st, ans := passkeyPage(t, hc, conf.Link.URL, auth.Assert); st != http.StatusOK || ans["ok"] != true {
		t.Fatalf("step-up: %d %v", st, ans)
	}
	c.cardStatus(cd.ID, cards.StatusDone)
	t.Logf("step-up link opened → done card: %s", time.Since(start))
	runs, _ := filepath.Glob(filepath.Join(data, "sandbox", "exec-*", "gone"))
	if len(runs) != 1 {
		t.Errorf("the action ran %d times, want once", len(runs))
	}

	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var strength string
	if err := conn.QueryRow(context.Background(), `SELECT data->>'approval_strength' FROM audit_log WHERE kind = 'approval.approved' AND data->>'approval' = $1`,
		string(cd.ID)).Scan(&strength); err != nil || strength != "passkey" {
		t.Fatalf("approval.approved approval_strength = %q, %v", strength, err)
	}
	if out := s.silasCLI(t, "passkey", "remove", "--owner", "webchat:local", "e2e-key"); !strings.Contains(out, "Removed 1") {
		t.Fatalf("passkey remove: %s", out)
	}
	// With the passkey gone, doctor names the owner who cannot approve
	// the irreversible rule any more.
	env := []string{"SILAS_CONFIG=" + cfgFile, "SILAS_SECRETS_WEB_ENABLED=true", "SILAS_SECRETS_WEB_PUBLIC_URL=" + base}
	if _, out, _ := silasInEnv(t, dsn, data, env, "doctor"); !strings.Contains(out, "these owners have no passkey") || !strings.Contains(out, "webchat:local") {
		t.Errorf("doctor does not list the owner without a passkey:\n%s", out)
	}
}
