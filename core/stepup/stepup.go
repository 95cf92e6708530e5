// Package stepup is the top rung of the risk ladder: passkeys (WebAuthn,
// github.com/go-webauthn/webauthn) registered per owner identity, and the
// step-up that an irreversible action needs before it runs.
//
// An approve tap on an irreversible card does not approve it: the decider
// (core/decide) asks Offer for a single-use, short-lived link to the secure
// form (secrets-web). The page there shows the exact action and its hash
// prefix and asks the browser for an assertion over a challenge derived
// from the approval id, the action hash, the request's signature and a
// nonce stored with the link (Challenge). FinishStepUp verifies the
// assertion (user verification required, the sign count moving forward)
// and has the decider approve the request — token minted, checked and its
// nonce consumed — in the same transaction that uses the link up, with
// approval_strength "passkey" on the audit entry.
//
// It must never approve without a verified assertion bound to the stored,
// intact request; never accept a link twice, after its expiry or for
// another request; never store or log a link token, an assertion or
// anything but public keys, credential ids and sign counts. The Ed25519
// approval token stays the only thing the executor trusts: a passkey is an
// extra factor before it is minted, never a replacement.
package stepup

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/decide"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/tracing"
)

// Defaults.
const (
	DefaultStepUpTTL = 5 * time.Minute
	DefaultEnrollTTL = 15 * time.Minute
)

// Paths of the secure form's passkey pages (secrets-web serves them).
const (
	EnrollPath = "/passkey/enroll/"
	StepUpPath = "/passkey/stepup/"
)

// Config configures the step-up.
type Config struct {
	// PublicURL is the secure form's https:// base URL (secrets_web.public_url):
	// links point there and it is the only origin assertions are accepted
	// from.
	PublicURL string
	// RPID is the WebAuthn relying party id (passkeys.rp_id); default: the
	// host of PublicURL. It must be a domain name (browsers refuse IP
	// addresses): for loopback development use https://localhost:8443.
	RPID string
	// StepUpTTL is how long a step-up link works (default 5 minutes).
	StepUpTTL time.Duration
	// EnrollTTL is how long an enrollment link works (default 15 minutes).
	EnrollTTL time.Duration
	// Key is the gateway's public key: a request whose signature does not
	// verify with it is never shown or approved.
	Key    ed25519.PublicKey
	Now    func() time.Time
	Logger *slog.Logger
}

// Store is what the step-up needs of the store (*store.Store).
type Store interface {
	Do(ctx context.Context, op store.Op) error
	GetPasskeyLink(ctx context.Context, ref string) (store.PasskeyLink, error)
	Passkeys(ctx context.Context, owner core.IdentityID) ([]store.Passkey, error)
	GetApproval(ctx context.Context, id core.ApprovalID) (core.ApprovalRequest, error)
	SweepPasskeyLinks(ctx context.Context, cutoff time.Time, limit int) (int, error)
}

// Runs starts what a step-up approved (*execute.Executor).
type Runs interface {
	RefuseUnready(ctx context.Context, tx execute.Tx, a core.ApprovalRequest, approver core.IdentityID) (*execute.Unready, error)
	Start(id core.ApprovalID)
}

// Service registers passkeys and runs step-ups.
type Service struct {
	cfg     Config
	st      Store
	base    string
	wa      *webauthn.WebAuthn
	decider *decide.Decider
	runs    Runs
	kick    func(core.ConversationID, int)
}

// Errors the pages answer with.
var (
	// ErrLinkNotFound: no such link, or a wrong token (one answer).
	ErrLinkNotFound = errors.New("stepup: link not valid")
	// ErrLinkUsed: the link was used before.
	ErrLinkUsed = errors.New("stepup: link already used")
	// ErrLinkExpired: the link is past its expiry.
	ErrLinkExpired = errors.New("stepup: link expired")
	// ErrClosed: the request was decided or expired meanwhile.
	ErrClosed = errors.New("stepup: the request is no longer open")
	// ErrAltered: the stored request no longer verifies.
	ErrAltered = errors.New("stepup: the request was altered after it was proposed")
	// ErrBadResponse: the browser's answer does not parse.
	ErrBadResponse = errors.New("stepup: the browser's answer could not be read")
)

// New checks cfg and builds the service.
func New(cfg Config, st Store) (*Service, error) {
	if st == nil {
		return nil, errors.New("stepup: Store is required")
	}
	u, err := url.Parse(cfg.PublicURL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("stepup: secrets_web.public_url %q must be an https:// URL", cfg.PublicURL)
	}
	if cfg.RPID == "" {
		cfg.RPID = u.Hostname()
	}
	if !validRPID(cfg.RPID) {
		return nil, fmt.Errorf("stepup: passkeys.rp_id %q must be a domain name browsers accept (not an IP address; for loopback use https://localhost:8443)", cfg.RPID)
	}
	if h := u.Hostname(); h != cfg.RPID && !strings.HasSuffix(h, "."+cfg.RPID) {
		return nil, fmt.Errorf("stepup: passkeys.rp_id %q must be secrets_web.public_url's host %q or a parent domain of it", cfg.RPID, h)
	}
	if cfg.StepUpTTL <= 0 {
		cfg.StepUpTTL = DefaultStepUpTTL
	}
	if cfg.EnrollTTL <= 0 {
		cfg.EnrollTTL = DefaultEnrollTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	origin := u.Scheme + "://" + u.Host
	wa, err := webauthn.New(&webauthn.Config{
		RPID: cfg.RPID, RPDisplayName: "Silas", RPOrigins: []string{origin},
		AuthenticatorSelection: protocol.AuthenticatorSelection{
			ResidentKey: protocol.ResidentKeyRequirementPreferred, UserVerification: protocol.VerificationRequired,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("stepup: webauthn: %w", err)
	}
	return &Service{cfg: cfg, st: st, base: origin, wa: wa}, nil
}

// validRPID: a host name with a dot or "localhost", never an IP literal.
func validRPID(id string) bool {
	if id == "localhost" {
		return true
	}
	if strings.Trim(id, "0123456789.") == "" || strings.Contains(id, ":") {
		return false
	}
	return protocol.ValidateRPID(id) == nil
}

// The link sweep: River runs Sweep every SweepEvery (core/background, on
// whichever instance works the job); it deletes links that expired or
// were used more than LinkRetention ago, sweepBatch at a time.
const (
	SweepEvery    = 10 * time.Minute
	LinkRetention = time.Hour
	sweepBatch    = 1000
	// sweepBatches bounds one run; what is left waits for the next.
	sweepBatches = 100
)

// Sweep deletes the passkey links (enrollment and step-up) that expired or
// were used more than LinkRetention ago. Until then a used or expired link
// still answers "already used" or "expired" (and a replayed answer is
// audited as such); after it, the same refusal as a link that never
// existed. Safe on several instances at once and twice in a row: each
// batch is one DELETE that skips rows another transaction holds.
func (s *Service) Sweep(ctx context.Context) error {
	cutoff := s.cfg.Now().Add(-LinkRetention)
	total := 0
	for range sweepBatches {
		n, err := s.st.SweepPasskeyLinks(ctx, cutoff, sweepBatch)
		if err != nil {
			return fmt.Errorf("stepup: sweep: %w", err)
		}
		total += n
		if n < sweepBatch {
			break
		}
	}
	if total > 0 {
		s.cfg.Logger.Debug("stepup: swept passkey links", slog.Int("deleted", total))
	}
	return nil
}

// Bind gives the service the decider that approves and the executor that
// runs what a step-up approved, and the outbox's kick. The gateway calls it
// once, before serving.
func (s *Service) Bind(d *decide.Decider, runs Runs, kick func(core.ConversationID, int)) {
	s.decider, s.runs, s.kick = d, runs, kick
}

// Challenge is the WebAuthn challenge of a step-up for request a: bound to
// its id, its action hash, the gateway's signature over the request and
// the link's nonce. An assertion over it confirms exactly this request as
// stored when the card was proposed, once.
func Challenge(a core.ApprovalRequest, nonce []byte) []byte {
	h := sha256.New()
	for _, part := range [][]byte{[]byte("silas/stepup/v1"), []byte(a.ID), a.ActionHash, a.Signature, nonce} {
		var n [4]byte
		n[0], n[1], n[2], n[3] = byte(len(part)>>24), byte(len(part)>>16), byte(len(part)>>8), byte(len(part))
		h.Write(n[:])
		h.Write(part)
	}
	return h.Sum(nil)
}

// user is an owner identity as the WebAuthn library sees it. The user
// handle is derived from the identity, so it needs no table and names no
// one (a hash).
type user struct {
	id    core.IdentityID
	creds []webauthn.Credential
}

func (u user) WebAuthnID() []byte {
	h := sha256.Sum256([]byte("silas/passkey/user\x00" + string(u.id)))
	return h[:]
}
func (u user) WebAuthnName() string                       { return string(u.id) }
func (u user) WebAuthnDisplayName() string                { return string(u.id) }
func (u user) WebAuthnCredentials() []webauthn.Credential { return u.creds }

func userOf(owner core.IdentityID, keys []store.Passkey) (user, error) {
	u := user{id: owner}
	for _, k := range keys {
		var c webauthn.Credential
		if err := json.Unmarshal(k.Credential, &c); err != nil {
			return user{}, fmt.Errorf("stepup: passkey %q of %s: %w", k.Name, owner, err)
		}
		// The counter column is the one moved by compare-and-swap.
		c.Authenticator.SignCount = uint32(k.SignCount)
		u.creds = append(u.creds, c)
	}
	return u, nil
}

// CredentialText is a credential id as shown and audited: base64url.
func CredentialText(id []byte) string { return base64.RawURLEncoding.EncodeToString(id) }

func newLink(kind string, owner core.IdentityID, now time.Time, ttl time.Duration) (store.PasskeyLink, string, error) {
	token, hash, err := secrets.NewToken()
	if err != nil {
		return store.PasskeyLink{}, "", err
	}
	nonce := make([]byte, 32)
	if _, err := rand.Read(nonce); err != nil {
		return store.PasskeyLink{}, "", fmt.Errorf("stepup: nonce: %w", err)
	}
	return store.PasskeyLink{Ref: core.NewID(), Kind: kind, TokenHash: hash, Owner: owner, Nonce: nonce,
		CreatedAt: now, ExpiresAt: now.Add(ttl)}, token, nil
}

func (s *Service) url(kind, ref, token string) string {
	p := EnrollPath
	if kind == store.PasskeyLinkStepUp {
		p = StepUpPath
	}
	return s.base + p + url.PathEscape(ref) + "?t=" + url.QueryEscape(token)
}

// checkLink reads link ref of kind for a page (GET: it uses nothing up).
func (s *Service) checkLink(ctx context.Context, ref, kind, token string) (store.PasskeyLink, error) {
	l, err := s.st.GetPasskeyLink(ctx, ref)
	if errors.Is(err, core.ErrNotFound) || (err == nil && (l.Kind != kind || !secrets.TokenMatches(l.TokenHash, token))) {
		return store.PasskeyLink{}, ErrLinkNotFound
	}
	if err != nil {
		return store.PasskeyLink{}, err
	}
	switch l.StateAt(s.cfg.Now()) {
	case store.LinkUsed:
		return l, ErrLinkUsed
	case store.LinkExpired:
		return l, ErrLinkExpired
	}
	return l, nil
}

// ---- enrollment ----

// Enroll makes a one-time enrollment link for owner's new passkey named
// name (silas passkey add) and returns its URL and expiry.
func (s *Service) Enroll(ctx context.Context, owner core.IdentityID, name string) (string, time.Time, error) {
	if owner == "" || !strings.Contains(string(owner), ":") {
		return "", time.Time{}, fmt.Errorf("stepup: owner %q is not an identity (channel:id)", owner)
	}
	name = strings.TrimSpace(name)
	if name == "" {
		name = "passkey"
	}
	if len(name) > 64 {
		return "", time.Time{}, errors.New("stepup: a passkey name is at most 64 characters")
	}
	l, token, err := newLink(store.PasskeyLinkEnroll, owner, s.cfg.Now(), s.cfg.EnrollTTL)
	if err != nil {
		return "", time.Time{}, err
	}
	l.Name = name
	err = s.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		return tx.InsertPasskeyLink(ctx, l, "")
	})
	if err != nil {
		return "", time.Time{}, err
	}
	return s.url(store.PasskeyLinkEnroll, l.Ref, token), l.ExpiresAt, nil
}

// EnrollView is what the enrollment page shows and hands the browser.
type EnrollView struct {
	Owner, Name string
	ExpiresAt   time.Time
	// Options is the PublicKeyCredentialCreationOptions JSON.
	Options []byte
}

func (s *Service) creation(owner core.IdentityID, keys []store.Passkey, challenge []byte) (*protocol.CredentialCreation, *webauthn.SessionData, user, error) {
	u, err := userOf(owner, keys)
	if err != nil {
		return nil, nil, user{}, err
	}
	var exclude []protocol.CredentialDescriptor
	for _, c := range u.creds {
		exclude = append(exclude, c.Descriptor())
	}
	cc, sess, err := s.wa.BeginRegistration(u, webauthn.WithExclusions(exclude),
		webauthn.WithAuthenticatorSelection(protocol.AuthenticatorSelection{
			ResidentKey: protocol.ResidentKeyRequirementPreferred, UserVerification: protocol.VerificationRequired}))
	if err != nil {
		return nil, nil, user{}, fmt.Errorf("stepup: registration options: %w", err)
	}
	// The challenge is the link's, stored when it was made: opening the
	// page twice shows the same ceremony and uses nothing up.
	cc.Response.Challenge = challenge
	sess.Challenge = protocol.URLEncodedBase64(challenge).String()
	sess.UserVerification = protocol.VerificationRequired
	return cc, sess, u, nil
}

// EnrollPage reads enrollment link ref for its page.
func (s *Service) EnrollPage(ctx context.Context, ref, token string) (EnrollView, error) {
	l, err := s.checkLink(ctx, ref, store.PasskeyLinkEnroll, token)
	if err != nil {
		return EnrollView{}, err
	}
	keys, err := s.st.Passkeys(ctx, l.Owner)
	if err != nil {
		return EnrollView{}, err
	}
	cc, _, _, err := s.creation(l.Owner, keys, l.Nonce)
	if err != nil {
		return EnrollView{}, err
	}
	opts, err := json.Marshal(cc.Response)
	if err != nil {
		return EnrollView{}, err
	}
	return EnrollView{Owner: string(l.Owner), Name: l.Name, ExpiresAt: l.ExpiresAt, Options: opts}, nil
}

// Refusal is a verification that failed: nothing was stored or run; the
// link is used up and the refusal audited.
type Refusal struct {
	// Reason is a short code (challenge_mismatch, user_verification,
	// sign_count_regression, replay, link_used, link_expired, …).
	Reason string
	// Message says it to the person.
	Message string
	// cause is the library's error, for the log.
	cause error
}

func (r *Refusal) Error() string { return "stepup: refused: " + r.Reason }

// FinishEnroll verifies the browser's registration (body: the
// PublicKeyCredential JSON) for link ref and stores the passkey. A
// *Refusal says why nothing was stored.
func (s *Service) FinishEnroll(ctx context.Context, ref, token string, body []byte) error {
	parsed, err := protocol.ParseCredentialCreationResponseBytes(body)
	if err != nil {
		return ErrBadResponse
	}
	var refused *Refusal
	err = s.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		refused = nil
		out, l, err := tx.UsePasskeyLink(ctx, ref, store.PasskeyLinkEnroll, secrets.HashToken(token))
		if err != nil {
			return nil, err
		}
		if e := linkRefusal(out); e != nil {
			refused = e
			return nil, nil
		}
		keys, err := tx.PasskeysOf(ctx, l.Owner)
		if err != nil {
			return nil, err
		}
		_, sess, u, err := s.creation(l.Owner, keys, l.Nonce)
		if err != nil {
			return nil, err
		}
		cred, err := s.wa.CreateCredential(u, *sess, parsed)
		if err != nil {
			refused = classify(err)
			return []audit.Entry{refusedEntry(l, refused)}, nil
		}
		raw, err := json.Marshal(cred)
		if err != nil {
			return nil, err
		}
		entries, err := tx.InsertPasskey(ctx, store.Passkey{CredentialID: cred.ID, Owner: l.Owner, Name: l.Name, Credential: raw,
			SignCount: int64(cred.Authenticator.SignCount)}, CredentialText(cred.ID))
		if errors.Is(err, store.ErrPasskeyExists) {
			refused = &Refusal{Reason: "exists", Message: "This passkey is registered already."}
			return []audit.Entry{refusedEntry(l, refused)}, nil
		}
		return entries, err
	})
	if err != nil {
		return err
	}
	if refused != nil {
		s.cfg.Logger.Warn("passkey registration refused", slog.String("ref", ref), slog.String("reason", refused.Reason), slog.Any("cause", refused.cause))
		return refused
	}
	s.cfg.Logger.Info("passkey registered", slog.String("ref", ref))
	return nil
}

// ---- step-up ----

// linkTx is what Offer needs of the decision's transaction (*store.Tx).
type linkTx interface {
	InsertPasskeyLink(ctx context.Context, l store.PasskeyLink, conv core.ConversationID) ([]audit.Entry, error)
	PasskeysOf(ctx context.Context, owner core.IdentityID) ([]store.Passkey, error)
}

// Offer implements decide.StepUp: a single-use step-up link for request
// a, for approver by, stored in the tap's transaction.
func (s *Service) Offer(ctx context.Context, tx decide.Tx, a core.ApprovalRequest, by core.IdentityID) (decide.Offer, error) {
	ltx, ok := tx.(linkTx)
	if !ok {
		return decide.Offer{}, errors.New("stepup: the decision's transaction cannot store a link")
	}
	keys, err := ltx.PasskeysOf(ctx, by)
	if err != nil {
		return decide.Offer{}, err
	}
	if len(keys) == 0 {
		return decide.Offer{Missing: fmt.Sprintf("Irreversible actions run only after a passkey confirmation, and %s has no passkey registered. "+
			"On the gateway's host: silas passkey add --owner %s — then tap again. Nothing was run.", by, by)}, nil
	}
	l, token, err := newLink(store.PasskeyLinkStepUp, by, tx.Now(), s.cfg.StepUpTTL)
	if err != nil {
		return decide.Offer{}, err
	}
	l.Approval = a.ID
	entries, err := ltx.InsertPasskeyLink(ctx, l, a.Conversation)
	if err != nil {
		return decide.Offer{}, err
	}
	off := decide.Offer{URL: s.url(store.PasskeyLinkStepUp, l.Ref, token), ExpiresAt: l.ExpiresAt}
	for _, e := range entries {
		off.Notes = append(off.Notes, decide.Note{Kind: e.Kind, Data: e.Data, Conversation: a.Conversation})
	}
	return off, nil
}

// StepUpView is what the step-up page shows and hands the browser.
type StepUpView struct {
	Approval  string
	Intent    string
	Command   string
	Risk      string
	Rationale string
	// HashPrefix is the first 16 hex digits of the action hash, as the
	// card's details and the audit log can be compared against.
	HashPrefix string
	ExpiresAt  time.Time
	// Options is the PublicKeyCredentialRequestOptions JSON.
	Options []byte
}

func (s *Service) assertion(a core.ApprovalRequest, l store.PasskeyLink, keys []store.Passkey) (*protocol.CredentialAssertion, *webauthn.SessionData, user, error) {
	u, err := userOf(l.Owner, keys)
	if err != nil {
		return nil, nil, user{}, err
	}
	if len(u.creds) == 0 {
		return nil, nil, user{}, &Refusal{Reason: "no_passkey", Message: "You have no passkey registered any more."}
	}
	ca, sess, err := s.wa.BeginLogin(u, webauthn.WithChallenge(Challenge(a, l.Nonce)),
		webauthn.WithUserVerification(protocol.VerificationRequired))
	if err != nil {
		return nil, nil, user{}, fmt.Errorf("stepup: assertion options: %w", err)
	}
	return ca, sess, u, nil
}

// StepUpPage reads step-up link ref for its page: the exact action, and
// the assertion options bound to it.
func (s *Service) StepUpPage(ctx context.Context, ref, token string) (StepUpView, error) {
	l, err := s.checkLink(ctx, ref, store.PasskeyLinkStepUp, token)
	if err != nil {
		return StepUpView{}, err
	}
	a, err := s.st.GetApproval(ctx, l.Approval)
	if err != nil {
		return StepUpView{}, err
	}
	if !a.Status.Open() || !s.cfg.Now().Before(a.ExpiresAt) {
		return StepUpView{}, ErrClosed
	}
	if err := decide.RequestIntact(s.cfg.Key, a); err != nil {
		return StepUpView{}, ErrAltered
	}
	keys, err := s.st.Passkeys(ctx, l.Owner)
	if err != nil {
		return StepUpView{}, err
	}
	ca, _, _, err := s.assertion(a, l, keys)
	if err != nil {
		return StepUpView{}, err
	}
	opts, err := json.Marshal(ca.Response)
	if err != nil {
		return StepUpView{}, err
	}
	var act core.Action
	cmd := a.Intent
	if json.Unmarshal(a.ActionCanonical, &act) == nil {
		cmd = act.CommandLine()
	}
	return StepUpView{Approval: string(a.ID), Intent: cards.ShowInvisible(a.Intent), Command: cards.ShowInvisible(cmd), Risk: string(a.Risk),
		Rationale: cards.ShowInvisible(a.Rationale), HashPrefix: HashPrefix(a.ActionHash), ExpiresAt: l.ExpiresAt, Options: opts}, nil
}

// HashPrefix is the first 16 hex digits of an action hash.
func HashPrefix(h []byte) string {
	x := hex.EncodeToString(h)
	if len(x) > 16 {
		x = x[:16]
	}
	return x
}

// FinishStepUp verifies the browser's assertion (body: the
// PublicKeyCredential JSON) for step-up link ref and, when it holds,
// approves the request: in one transaction the link is used up, the
// passkey's sign count moves forward and the decider approves (token
// minted, nonce consumed, execution queued); the execution starts once
// committed. A *Refusal says why nothing was run (the link is used up and
// the refusal audited either way).
func (s *Service) FinishStepUp(ctx context.Context, ref, token string, body []byte) error {
	if s.decider == nil || s.runs == nil {
		return errors.New("stepup: not bound to a decider")
	}
	parsed, err := protocol.ParseCredentialRequestResponseBytes(body)
	if err != nil {
		return ErrBadResponse
	}
	// The step-up is the tap of an irreversible card: its decision span
	// links to the proposal's trace (decide.ApproveStepUp → tracing.Tapped)
	// and the execution it queues links back to it.
	ctx, span := tracing.Start(ctx, tracing.SpanDecide)
	defer span.End()
	var (
		refused  *Refusal
		result   decide.Result
		after    func()
		conv     core.ConversationID
		approval core.ApprovalID
		proposal string // the request's traceparent
	)
	err = s.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		refused, result, after, conv, approval, proposal = nil, decide.Result{}, nil, "", "", ""
		out, l, err := tx.UsePasskeyLink(ctx, ref, store.PasskeyLinkStepUp, secrets.HashToken(token))
		if err != nil {
			return nil, err
		}
		approval = l.Approval
		if e := linkRefusal(out); e != nil {
			refused = e
			if out == store.LinkNotFound {
				return nil, nil
			}
			return []audit.Entry{refusedEntry(l, refused)}, nil
		}
		refuse := func(reason, msg string) ([]audit.Entry, error) {
			refused = &Refusal{Reason: reason, Message: msg}
			return []audit.Entry{refusedEntry(l, refused)}, nil
		}
		a, err := tx.GetApproval(ctx, l.Approval)
		if err != nil {
			return nil, err
		}
		conv, proposal = a.Conversation, a.Traceparent
		keys, err := tx.PasskeysOf(ctx, l.Owner)
		if err != nil {
			return nil, err
		}
		_, sess, u, err := s.assertion(a, l, keys)
		var r *Refusal
		if errors.As(err, &r) {
			return refuse(r.Reason, r.Message)
		}
		if err != nil {
			return nil, err
		}
		cred, err := s.wa.ValidateLogin(u, *sess, parsed)
		if err != nil {
			refused = classify(err)
			return []audit.Entry{refusedEntry(l, refused)}, nil
		}
		if cred.Authenticator.CloneWarning {
			return refuse("sign_count_regression", "This passkey's signature counter went backwards (a copied key or a replayed answer): nothing was run.")
		}
		var from int64 = -1
		for _, k := range keys {
			if bytes.Equal(k.CredentialID, cred.ID) {
				from = k.SignCount
			}
		}
		raw, err := json.Marshal(cred)
		if err != nil {
			return nil, err
		}
		if ok, err := tx.AdvancePasskey(ctx, cred.ID, from, int64(cred.Authenticator.SignCount), raw); err != nil {
			return nil, err
		} else if !ok {
			return refuse("replay", "This confirmation was used already: nothing was run.")
		}
		proof := decide.Proof{Credential: CredentialText(cred.ID), SignCount: cred.Authenticator.SignCount}
		res, err := s.decider.ApproveStepUp(ctx, tx, a, l.Owner, proof)
		if err != nil {
			return nil, err
		}
		if res.Refused != "" {
			return refuse(res.Refused, res.Toast)
		}
		entries := []audit.Entry{{Kind: audit.KindStepUpVerified, Actor: string(l.Owner), Conversation: string(a.Conversation), Data: map[string]any{
			"approval": string(a.ID), "ref": l.Ref, "credential": proof.Credential, "sign_count": proof.SignCount,
			"user_verified": parsed.Response.AuthenticatorData.Flags.HasUserVerified()}}}
		if res.Queued != "" {
			// A run that cannot start (a declared secret not stored) is
			// refused here, as for a tap (core/engine).
			un, err := s.runs.RefuseUnready(ctx, tx, res.Approved, l.Owner)
			if err != nil {
				return nil, err
			}
			if un != nil {
				for i, c := range res.Updates {
					if c.ID == un.Card.ID {
						res.Updates[i] = un.Card
					}
				}
				res.Queued = ""
				entries = append(entries, un.Audit)
				after = un.After
			}
		}
		for _, c := range res.Updates {
			if err := tx.QueueMessage(a.Channel, core.OpUpdate, string(c.ID), core.OutMessage{Conversation: a.Conversation, Card: c}); err != nil {
				return nil, err
			}
		}
		for _, n := range res.Notes {
			e := audit.Entry{Kind: n.Kind, Actor: string(l.Owner), Conversation: string(a.Conversation), Data: n.Data}
			if n.Conversation != "" {
				e.Conversation = string(n.Conversation)
			}
			entries = append(entries, e)
		}
		result = res
		return entries, nil
	})
	if span.IsRecording() {
		outcome := "approved"
		if refused != nil {
			outcome = refused.Reason
		}
		span.SetAttributes(tracing.AttrApprovalID.String(string(approval)), tracing.AttrOutcome.String(outcome))
		// The transaction saw only the span's context (core/store), so
		// the link to the proposal is added here.
		tracing.LinkTo(span, proposal)
	}
	if err != nil {
		return err
	}
	if refused != nil {
		s.cfg.Logger.WarnContext(ctx, "passkey step-up refused", slog.String("ref", ref), slog.String("reason", refused.Reason), slog.Any("cause", refused.cause))
		return refused
	}
	if id := result.Queued; id != "" {
		s.runs.Start(id)
	}
	if after != nil {
		after()
	}
	if s.kick != nil && conv != "" {
		s.kick(conv, len(result.Updates))
	}
	s.cfg.Logger.InfoContext(ctx, "passkey step-up verified", slog.String("ref", ref), slog.String("approval", string(result.Approved.ID)))
	return nil
}

func linkRefusal(o store.LinkOutcome) *Refusal {
	switch o {
	case store.LinkNotFound:
		return &Refusal{Reason: "link_not_found", Message: "This link is not valid."}
	case store.LinkUsed:
		return &Refusal{Reason: "link_used", Message: "This link was used already. Tap the card again for a new one."}
	case store.LinkExpired:
		return &Refusal{Reason: "link_expired", Message: "This link has expired. Tap the card again for a new one."}
	}
	return nil
}

func refusedEntry(l store.PasskeyLink, r *Refusal) audit.Entry {
	data := map[string]any{"ref": l.Ref, "kind": l.Kind, "reason": r.Reason}
	if l.Approval != "" {
		data["approval"] = string(l.Approval)
	}
	return audit.Entry{Kind: audit.KindStepUpRefused, Actor: string(l.Owner), Data: data}
}

// classify names why the library refused an answer: a wrong challenge
// (another request's, or a request changed since), a missing user
// verification, or anything else.
func classify(err error) *Refusal {
	var pe *protocol.Error
	msg := err.Error()
	if errors.As(err, &pe) {
		msg = pe.Details + " " + pe.DevInfo
	}
	low := strings.ToLower(msg)
	switch {
	case strings.Contains(low, "challenge"):
		return &Refusal{Reason: "challenge_mismatch", Message: "This confirmation was made for another request: nothing was run.", cause: err}
	case strings.Contains(low, "verif") && strings.Contains(low, "user"):
		return &Refusal{Reason: "user_verification", Message: "Your passkey did not verify you (PIN, fingerprint or face): nothing was run.", cause: err}
	}
	return &Refusal{Reason: "assertion_invalid", Message: "The passkey's answer did not verify: nothing was run.", cause: err}
}
