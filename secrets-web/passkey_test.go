package secretsweb

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"html"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/decide"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/stepup"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/verify"
	"github.com/silas-gateway/silas/internal/browsertest"
	"github.com/silas-gateway/silas/internal/softauthn"
)

var _ Passkeys = (*stepup.Service)(nil)

const pkOwner core.IdentityID = "test:owner"

// lazyPasskeys lets setup start the form before the step-up, which needs
// the form's store, exists.
type lazyPasskeys struct{ Passkeys }

// startedRuns records the executions a step-up started.
type startedRuns struct {
	mu  sync.Mutex
	ids []core.ApprovalID
}

func (r *startedRuns) RefuseUnready(context.Context, execute.Tx, core.ApprovalRequest, core.IdentityID) (*execute.Unready, error) {
	return nil, nil
}
func (r *startedRuns) Start(id core.ApprovalID) {
	r.mu.Lock()
	r.ids = append(r.ids, id)
	r.mu.Unlock()
}
func (r *startedRuns) count() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.ids) }

type pkBundle struct {
	*bundle
	su   *stepup.Service
	d    *decide.Decider
	key  ed25519.PrivateKey
	runs *startedRuns
}

// passkeySetup serves the form on https://localhost:<port> (browsers
// refuse passkeys on IP addresses) with the passkey pages of a step-up
// service over the form's database.
func passkeySetup(t *testing.T) *pkBundle {
	t.Helper()
	lazy := &lazyPasskeys{}
	b := setup(t, true, func(cfg *Config, deps *Deps) {
		_, port, _ := net.SplitHostPort(cfg.Listen)
		cfg.PublicURL = "https://localhost:" + port
		deps.Passkeys = lazy
	})
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	su, err := stepup.New(stepup.Config{PublicURL: b.base, Key: key.Public().(ed25519.PublicKey), Now: b.clock.Now, Logger: slog.New(slog.DiscardHandler)}, b.db)
	if err != nil {
		t.Fatal(err)
	}
	d := decide.New(decide.Config{Key: key, TokenTTL: 10 * time.Minute, StepUp: su})
	p := &pkBundle{bundle: b, su: su, d: d, key: key, runs: &startedRuns{}}
	su.Bind(d, p.runs, nil)
	lazy.Passkeys = su
	return p
}

// propose stores a signed irreversible request, as the engine does.
func (p *pkBundle) propose(t *testing.T, argv ...string) core.ApprovalRequest {
	t.Helper()
	act := core.Action{Tool: "shell", Argv: argv, Verify: []verify.Check{verify.ExitCodeZero()}}
	canonical, _ := act.Canonical()
	hash, _ := act.Hash()
	now := p.clock.Now().UTC()
	a := core.ApprovalRequest{ID: core.ApprovalID(core.NewID()), Channel: "test", Conversation: "test:chat", Requester: pkOwner,
		ActionCanonical: canonical, ActionHash: hash, Intent: "format a disk", Rationale: "asked for", Risk: cards.RiskIrreversible,
		Approvers: []string{"role:owner"}, Status: core.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(10 * time.Minute)}
	if err := decide.SignRequest(p.key, &a); err != nil {
		t.Fatal(err)
	}
	if err := p.db.Do(context.Background(), func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) { tx.QueueApproval(a); return nil, nil }); err != nil {
		t.Fatal(err)
	}
	return a
}

// tapLink taps approve on a as the owner and returns the card's step-up link.
func (p *pkBundle) tapLink(t *testing.T, a core.ApprovalRequest) string {
	t.Helper()
	var r decide.Result
	turn := core.Turn{Channel: "test", Conversation: a.Conversation, Sender: pkOwner, Tap: &core.Tap{Card: cards.ID(a.ID), Choice: "approve"}}
	err := p.db.Do(context.Background(), func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		var err error
		r, err = p.d.Tap(ctx, tx, turn, core.TrustOwner)
		return nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Updates) != 1 || r.Updates[0].Link == nil {
		t.Fatalf("tap = %+v, want a card with a step-up link", r)
	}
	return r.Updates[0].Link.URL
}

func (p *pkBundle) status(t *testing.T, id core.ApprovalID) core.ApprovalStatus {
	t.Helper()
	a, err := p.db.GetApproval(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return a.Status
}

var (
	reAttr    = regexp.MustCompile(`data-(token|csrf)="([^"]*)"`)
	reOptions = regexp.MustCompile(`(?s)<script type="application/json" id="options">(.*?)</script>`)
)

// page is a passkey page as a browser gets it: link token, CSRF token and
// the WebAuthn options.
type pkPage struct {
	token, csrf string
	options     []byte
}

func (p *pkBundle) open(t *testing.T, c *http.Client, link string) pkPage {
	t.Helper()
	r := p.get(t, c, link)
	if r.status != http.StatusOK {
		t.Fatalf("GET %s = %d %s", link, r.status, r.body)
	}
	if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
		t.Fatalf("CSP = %q", csp)
	}
	var pg pkPage
	for _, m := range reAttr.FindAllStringSubmatch(r.body, -1) {
		if m[1] == "token" {
			pg.token = html.UnescapeString(m[2])
		} else {
			pg.csrf = html.UnescapeString(m[2])
		}
	}
	m := reOptions.FindStringSubmatch(r.body)
	if m == nil || pg.token == "" || pg.csrf == "" {
		t.Fatalf("page without token, csrf or options:\n%s", r.body)
	}
	pg.options = []byte(m[1])
	return pg
}

func (p *pkBundle) answer(t *testing.T, c *http.Client, link string, pg pkPage, credential []byte, csrf string) (int, passkeyAnswer) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"t": pg.token, "csrf": csrf, "credential": json.RawMessage(credential)})
	u, _ := url.Parse(link)
	req, _ := http.NewRequest(http.MethodPost, p.base+u.Path, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", p.base)
	r := p.do(t, c, req)
	var a passkeyAnswer
	if err := json.Unmarshal([]byte(r.body), &a); err != nil {
		t.Fatalf("answer %d %q: %v", r.status, r.body, err)
	}
	return r.status, a
}

// TestPasskeyPages: the enrollment and step-up pages over HTTP, answered
// by a software authenticator: registered once, confirmed once, the
// confirmation approves; a forged CSRF token, a used link and another
// browser's cookie change nothing.
func TestPasskeyPages(t *testing.T) {
	p := passkeySetup(t)
	auth, err := softauthn.New(p.base)
	if err != nil {
		t.Fatal(err)
	}
	c := p.browser()
	link, _, err := p.su.Enroll(context.Background(), pkOwner, "laptop")
	if err != nil {
		t.Fatal(err)
	}
	pg := p.open(t, c, link)
	cred, err := auth.Register(pg.options)
	if err != nil {
		t.Fatal(err)
	}
	if st, a := p.answer(t, c, link, pg, cred, pg.csrf+"x"); st != http.StatusForbidden || a.OK {
		t.Fatalf("forged csrf: %d %+v", st, a)
	}
	if st, a := p.answer(t, p.browser(), link, pg, cred, pg.csrf); st != http.StatusForbidden || a.OK {
		t.Fatalf("another browser (no cookie): %d %+v", st, a)
	}
	if st, a := p.answer(t, c, link, pg, cred, pg.csrf); st != http.StatusOK || !a.OK {
		t.Fatalf("registration: %d %+v", st, a)
	}
	if r := p.get(t, c, link); r.status != http.StatusConflict {
		t.Fatalf("enrollment link after use = %d", r.status)
	}

	a := p.propose(t, "mkfs.ext4", "/dev/sdz")
	link = p.tapLink(t, a)
	r := p.get(t, c, link)
	if !strings.Contains(r.body, "mkfs.ext4 /dev/sdz") || !strings.Contains(r.body, stepup.HashPrefix(a.ActionHash)) {
		t.Fatalf("step-up page does not show the action and its hash prefix:\n%s", r.body)
	}
	pg = p.open(t, c, link)
	assertion, err := auth.Assert(pg.options)
	if err != nil {
		t.Fatal(err)
	}
	if st, ans := p.answer(t, c, link, pg, assertion, pg.csrf); st != http.StatusOK || !ans.OK {
		t.Fatalf("step-up: %d %+v", st, ans)
	}
	if got := p.status(t, a.ID); got != core.ApprovalApproved || p.runs.count() != 1 {
		t.Fatalf("after the step-up: status %s, %d runs", got, p.runs.count())
	}
	if st, ans := p.answer(t, c, link, pg, assertion, pg.csrf); st != http.StatusConflict || ans.OK {
		t.Fatalf("replayed step-up: %d %+v", st, ans)
	}
	if p.runs.count() != 1 {
		t.Fatal("a replay started a second run")
	}
}

// TestBrowserPasskeyStepUp drives the pages in Chromium with its virtual
// authenticator (CDP WebAuthn domain, user verification on): a passkey is
// registered through its link, an irreversible card's link confirms the
// action and it runs once. Refused, with the request left undecided and
// nothing run: the same assertion posted again, an assertion over another
// request's challenge posted to this link, the action edited in the
// database after the page was opened, a link past its lifetime, a
// signature counter put back (a cloned key), an assertion without user
// verification; a used or expired link's page says so.
func TestBrowserPasskeyStepUp(t *testing.T) {
	p := passkeySetup(t)
	bctx := browsertest.NewWith(t, browsertest.IgnoreCertificateErrors())
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()

	var authID webauthn.AuthenticatorID
	if err := chromedp.Do(ctx, chromedp.Navigate(p.base+"/static/secrets.css"), chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, webauthn.Enable, webauthn.EnableParams{}); err != nil {
			return err
		}
		res, err := cdp.Call(ctx, tg, webauthn.AddVirtualAuthenticator, webauthn.AddVirtualAuthenticatorParams{Options: &webauthn.VirtualAuthenticatorOptions{
			Protocol: webauthn.AuthenticatorProtocolCtap2, Ctap2version: webauthn.Ctap2versionCtap21, Transport: webauthn.AuthenticatorTransportInternal,
			HasResidentKey: true, HasUserVerification: true, IsUserVerified: true, AutomaticPresenceSimulation: true}})
		authID = res.AuthenticatorID
		return err
	})); err != nil {
		t.Fatalf("virtual authenticator: %v", err)
	}
	// js evaluates expr in the page (awaiting a promise).
	js := func(expr string) any {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[any](expr, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		return v
	}
	// run opens link, runs before (the page is loaded), presses the
	// page's button and waits for its outcome.
	run := func(link string, before ...func()) (state, msg string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(link), chromedp.WaitVisible(chromedp.ID("go"))); err != nil {
			t.Fatalf("open %s: %v", link, err)
		}
		for _, b := range before {
			b()
		}
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("go"))); err != nil {
			t.Fatalf("click on %s: %v", link, err)
		}
		st, err := chromedp.Run(ctx, chromedp.Poll[string](
			`(s => ["done","refused","cancelled","unsupported","error"].includes(s) && s)(document.getElementById('passkey').dataset.state)`,
			chromedp.WithPollingTimeout(30*time.Second)))
		if err != nil {
			t.Fatalf("waiting for the page's outcome: %v", err)
		}
		msg, _ = chromedp.Run(ctx, chromedp.Text(chromedp.ID("status")))
		return st, msg
	}

	link, _, err := p.su.Enroll(context.Background(), pkOwner, "chromium")
	if err != nil {
		t.Fatal(err)
	}
	if st, msg := run(link); st != "done" {
		t.Fatalf("registration in the browser: %s %q", st, msg)
	}
	keys, err := p.db.Passkeys(context.Background(), pkOwner)
	if err != nil || len(keys) != 1 {
		t.Fatalf("passkeys after registration = %v, %v", keys, err)
	}

	a := p.propose(t, "mkfs.ext4", "/dev/sdz")
	link = p.tapLink(t, a)
	start := time.Now()
	// The page's answer is kept (a hook on fetch) to be replayed below.
	const keep = `(() => { const f = window.fetch; window.__sent = []; window.fetch = (u, o) => { window.__sent.push(o.body); return f(u, o); }; return true })()`
	if st, msg := run(link, func() { js(keep) }); st != "done" {
		t.Fatalf("step-up in the browser: %s %q", st, msg)
	}
	t.Logf("link → approved execution queued in %s", time.Since(start))
	if got := p.status(t, a.ID); got != core.ApprovalApproved || p.runs.count() != 1 {
		t.Fatalf("after the step-up: status %s, %d runs", got, p.runs.count())
	}
	// The same assertion posted again: refused, nothing runs again.
	replay := `fetch(location.pathname, {method: "POST", credentials: "same-origin", headers: {"Content-Type": "application/json"}, body: window.__sent[0]}).then(r => r.status)`
	if st := js(replay); st != float64(http.StatusConflict) {
		t.Fatalf("replayed assertion answered %v, want 409", st)
	}
	// Each refusal is audited (stepup.refused) with its reason.
	audited := func(what string, id core.ApprovalID, reason string) {
		t.Helper()
		var got []string
		rows, err := p.db.Pool().Query(context.Background(), `SELECT data->>'reason' FROM audit_log WHERE kind = 'stepup.refused' AND data->>'approval' = $1 ORDER BY seq`, string(id))
		if err == nil {
			got, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil || len(got) == 0 || got[len(got)-1] != reason {
			t.Errorf("%s: stepup.refused reasons %v (%v), want the last %s", what, got, err, reason)
		}
	}
	audited("a replayed assertion", a.ID, "link_used")
	// The used link: the page says so.
	heading := func(link string) string {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(link)); err != nil {
			t.Fatal(err)
		}
		h, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("h1")))
		return h
	}
	if h := heading(link); h != "Link already used" {
		t.Fatalf("used link shows %q", h)
	}
	refusedRun := func(what string, b core.ApprovalRequest, link, want, reason string, before ...func()) {
		t.Helper()
		if st, msg := run(link, before...); st != "refused" || !strings.Contains(msg, want) {
			t.Fatalf("%s: %s %q, want refused saying %q", what, st, msg, want)
		}
		if got := p.status(t, b.ID); got != core.ApprovalConfirming || p.runs.count() != 1 {
			t.Fatalf("after %s: status %s, %d runs", what, got, p.runs.count())
		}
		audited(what, b.ID, reason)
	}

	// An assertion over another request's challenge, posted to this link
	// (with this link's tokens and cookie): the page of c signs c's
	// challenge, then posts to b's link.
	b := p.propose(t, "wipefs", "-a", "/dev/sdx")
	bLink := p.tapLink(t, b)
	if err := chromedp.Do(ctx, chromedp.Navigate(bLink), chromedp.WaitVisible(chromedp.ID("go"))); err != nil {
		t.Fatal(err)
	}
	bTok := js(`JSON.stringify([document.getElementById('passkey').dataset.token, document.getElementById('passkey').dataset.csrf, location.pathname])`).(string)
	c2 := p.propose(t, "shred", "/dev/sdw")
	refusedRun("another request's challenge", b, p.tapLink(t, c2), "another request", "challenge_mismatch", func() {
		js(`(([t, c, path]) => { const r = document.getElementById('passkey'); r.dataset.token = t; r.dataset.csrf = c; history.replaceState(null, "", path); return true })(` + bTok + `)`)
	})

	// The action edited in the database after the page was opened.
	d := p.propose(t, "blkdiscard", "/dev/sdv")
	refusedRun("an action edited after the card", d, p.tapLink(t, d), "another request", "challenge_mismatch", func() {
		evil := core.Action{Tool: "shell", Argv: []string{"rm", "-rf", "/srv"}}
		canonical, _ := evil.Canonical()
		hash, _ := evil.Hash()
		if _, err := p.db.Pool().Exec(context.Background(), `UPDATE approvals SET action_canonical = $2, action_hash = $3 WHERE id = $1`,
			string(d.ID), canonical, hash); err != nil {
			t.Fatal(err)
		}
	})

	// A link older than its lifetime: the page says so; an answer from a
	// page opened before is refused.
	e := p.propose(t, "mkswap", "/dev/sdu")
	eLink := p.tapLink(t, e)
	refusedRun("a link past its lifetime", e, eLink, "expired", "link_expired", func() { p.clock.Add(stepup.DefaultStepUpTTL + time.Second) })
	if h := heading(eLink); h != "Link expired" {
		t.Fatalf("an expired link shows %q", h)
	}
	if h := heading(p.tapLink(t, e)); h != "Confirm with passkey" {
		t.Fatalf("a fresh link after the expired one shows %q", h)
	}

	// A signature counter that went backwards: the authenticator's
	// credential is put back with a lower count (a cloned key).
	f := p.propose(t, "mkdosfs", "/dev/sdt")
	refusedRun("a sign-count regression", f, p.tapLink(t, f), "counter went backwards", "sign_count_regression", func() {
		if err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			got, err := cdp.Call(ctx, tg, webauthn.GetCredentials, webauthn.GetCredentialsParams{AuthenticatorID: authID})
			if err != nil || len(got.Credentials) != 1 {
				return fmt.Errorf("credentials %v: %v", got.Credentials, err)
			}
			cr := got.Credentials[0]
			if _, err := cdp.Call(ctx, tg, webauthn.RemoveCredential, webauthn.RemoveCredentialParams{AuthenticatorID: authID, CredentialID: cr.CredentialID}); err != nil {
				return err
			}
			// Only the fields this Chromium takes back (cdproto's struct
			// also sends CMTG fields it refuses).
			add := cdp.Command[map[string]any, cdp.Empty]{Method: webauthn.CommandAddCredential}
			_, err = cdp.Call(ctx, tg, add, map[string]any{"authenticatorId": authID, "credential": map[string]any{
				"credentialId": cr.CredentialID, "isResidentCredential": cr.IsResidentCredential, "rpId": cr.RpID,
				"privateKey": cr.PrivateKey, "userHandle": cr.UserHandle, "signCount": 0,
			}})
			return err
		})); err != nil {
			t.Fatal(err)
		}
	})

	// User verification absent: the authenticator answers without the UV flag.
	g := p.propose(t, "dd", "if=/dev/zero", "of=/dev/sdy")
	link = p.tapLink(t, g)
	if err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		bad := true
		_, err := cdp.Call(ctx, tg, webauthn.SetResponseOverrideBits, webauthn.SetResponseOverrideBitsParams{AuthenticatorID: authID, IsBadUV: &bad})
		return err
	})); err != nil {
		t.Fatal(err)
	}
	if st, msg := run(link); st != "refused" || !strings.Contains(msg, "did not verify you") {
		t.Fatalf("step-up without user verification: %s %q", st, msg)
	}
	if got := p.status(t, g.ID); got != core.ApprovalConfirming || p.runs.count() != 1 {
		t.Fatalf("after a refused step-up: status %s, %d runs", got, p.runs.count())
	}
	audited("no user verification", g.ID, "user_verification")
	// A browser without WebAuthn (an in-app browser): the page says to open
	// the link in the system browser, and the link stays usable.
	h := p.propose(t, "mkntfs", "/dev/sds")
	hLink := p.tapLink(t, h)
	if err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, cdppage.AddScriptToEvaluateOnNewDocument, cdppage.AddScriptToEvaluateOnNewDocumentParams{Source: "delete window.PublicKeyCredential;"})
		return err
	}), chromedp.Navigate(hLink)); err != nil {
		t.Fatal(err)
	}
	st, err := chromedp.Run(ctx, chromedp.Poll[string](`document.getElementById('passkey').dataset.state === 'unsupported' && document.getElementById('status').textContent`,
		chromedp.WithPollingTimeout(10*time.Second)))
	if err != nil || !strings.Contains(st, "system browser") {
		t.Fatalf("page without WebAuthn says %q (%v)", st, err)
	}
	if l, err := p.db.GetPasskeyLink(context.Background(), strings.TrimPrefix(strings.Split(hLink, "?")[0], p.base+stepup.StepUpPath)); err != nil || !l.UsedAt.IsZero() {
		t.Fatalf("the link after an unsupported browser: %+v, %v", l, err)
	}
	for _, e := range browsertest.JSErrors(bctx) {
		// 404 favicon, 409 used link, 403 refused answer: statuses the
		// test asked for, which Chromium logs as console errors.
		if !strings.Contains(e, "Failed to load resource") {
			t.Errorf("page error: %s", e)
		}
	}
}
