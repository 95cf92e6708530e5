package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/consent"
	"github.com/silas-gateway/silas/core/tracing"
)

// Standing consents (core/consent). The store keeps them as minted and
// counts their uses; it never decides whether one applies (the signature
// and the limits are core/consent's), and it never re-signs one. Each read
// carries the highest use and unit counts the audit log records for the
// consent (consent.used), so core/consent can refuse a counter reset.

const consentSelect = `SELECT id, scope, conversation, run_id, flow, flow_version, nodes, tool, argv, prefix, programs, secrets, verify::text,
	max_risk, lanes, max_uses, uses, cost_cap, units, created_by, created_at, expires_at, revoked_at, signature,
	(SELECT coalesce(max((l.data->>'uses')::int), 0) FROM audit_log l WHERE l.kind = 'consent.used' AND l.data->>'consent' = consents.id),
	(SELECT coalesce(max((l.data->>'units')::int), 0) FROM audit_log l WHERE l.kind = 'consent.used' AND l.data->>'consent' = consents.id)
	FROM consents`

func scanConsent(row pgx.Row) (consent.Consent, error) {
	var c consent.Consent
	var scope, risk, verify string
	var revoked *time.Time
	err := row.Scan(&c.ID, &scope, &c.Conversation, &c.Run, &c.Flow, &c.FlowVersion, &c.Nodes, &c.Tool, &c.Argv, &c.Prefix, &c.Programs, &c.Secrets, &verify,
		&risk, &c.Lanes, &c.MaxUses, &c.Uses, &c.CostCap, &c.Units, &c.CreatedBy, &c.CreatedAt, &c.ExpiresAt, &revoked, &c.Signature,
		&c.AuditedUses, &c.AuditedUnits)
	if err != nil {
		return c, notFound(err)
	}
	c.Scope, c.MaxRisk, c.Verify = consent.Scope(scope), cards.Risk(risk), []byte(verify)
	if revoked != nil {
		c.RevokedAt = *revoked
	}
	return c, nil
}

func rowToConsent(row pgx.CollectableRow) (consent.Consent, error) { return scanConsent(row) }

// InsertConsent stores a minted (signed) consent. The verify checks are
// stored as jsonb, which may reorder keys: they are compared canonically.
func (t *Tx) InsertConsent(ctx context.Context, c consent.Consent) error {
	_, err := t.exec(ctx, `INSERT INTO consents (id, scope, conversation, run_id, flow, flow_version, nodes, tool, argv, prefix, secrets, verify,
		max_risk, lanes, max_uses, cost_cap, created_by, created_at, expires_at, signature, programs)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12::jsonb,$13,$14,$15,$16,$17,$18,$19,$20,$21)`,
		c.ID, string(c.Scope), c.Conversation, c.Run, c.Flow, c.FlowVersion, nonNil(c.Nodes), c.Tool, nonNil(c.Argv), c.Prefix, nonNil(c.Secrets),
		string(orJSONList(c.Verify)), string(c.MaxRisk), nonNil(c.Lanes), c.MaxUses, c.CostCap, c.CreatedBy, c.CreatedAt, c.ExpiresAt, c.Signature, nonNil(c.Programs))
	if err != nil {
		return fmt.Errorf("store: insert consent %s: %w", c.ID, err)
	}
	return nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func orJSONList(b []byte) []byte {
	if len(b) == 0 {
		return []byte("[]")
	}
	return b
}

// ConsentsFor reads, locked, the conversation's consents of tool that
// were not revoked before since (revoked and expired ones included, so a
// refusal can say why), newest first. Locking serialises two uses of one
// consent.
func (t *Tx) ConsentsFor(ctx context.Context, conv core.ConversationID, tool string, since time.Time) ([]consent.Consent, error) {
	var out []consent.Consent
	err := t.send(ctx, []extra{consentsRead("consents of conversation", &out, consentSelect+` WHERE conversation = $1 AND tool = $2 AND scope = 'conversation'
		AND expires_at > $3::timestamptz - interval '1 day' ORDER BY created_at DESC LIMIT 64 FOR UPDATE`, conv, tool, since)})
	if err != nil {
		return nil, fmt.Errorf("store: consents of %s: %w", conv, err)
	}
	return out, nil
}

// consentsRead is a read of at most 64 consents into out, sent with the
// queued statements (one round trip: a query of its own would cost two).
func consentsRead(label string, out *[]consent.Consent, sql string, args ...any) extra {
	return extra{label, func(b *pgx.Batch) {
		b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
			var err error
			*out, err = pgx.CollectRows(rows, rowToConsent)
			return err
		})
	}}
}

// UseConsent counts one use of consent id costing units, by
// compare-and-swap on its limits: ok=false when it is revoked, expired,
// exhausted or capped by now (the caller read it locked, so this is a
// last check, not the decision). It returns the counts after this use.
func (t *Tx) UseConsent(ctx context.Context, id string, units int) (uses, total int, ok bool, err error) {
	err = t.queryRow(ctx, `UPDATE consents SET uses = uses + 1, units = units + $2
		WHERE id = $1 AND revoked_at IS NULL AND expires_at > $3 AND uses < max_uses AND units + $2 <= cost_cap
		RETURNING uses, units`, id, units, t.now()).Scan(&uses, &total)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("store: use consent %s: %w", id, err)
	}
	return uses, total, true, nil
}

// GetConsent reads one consent.
func (s *Store) GetConsent(ctx context.Context, id string) (consent.Consent, error) {
	c, err := scanConsent(s.pool.QueryRow(ctx, consentSelect+" WHERE id = $1", id))
	if err != nil && !errors.Is(err, core.ErrNotFound) {
		return c, fmt.Errorf("store: get consent: %w", err)
	}
	return c, err
}

// ActiveConsents lists consents neither revoked nor expired at now, in
// conversation conv (all when conv is ""), oldest first.
func (s *Store) ActiveConsents(ctx context.Context, conv core.ConversationID, now time.Time) ([]consent.Consent, error) {
	rows, err := s.pool.Query(ctx, consentSelect+` WHERE revoked_at IS NULL AND expires_at > $1 AND ($2 = '' OR conversation = $2)
		ORDER BY created_at`, now, conv)
	if err != nil {
		return nil, fmt.Errorf("store: active consents: %w", err)
	}
	out, err := pgx.CollectRows(rows, rowToConsent)
	if err != nil {
		return nil, fmt.Errorf("store: active consents: %w", err)
	}
	return out, nil
}

// RevokeConsent revokes consent id (in conversation conv, unless conv is
// ""), audited (consent.revoked, by actor); false when there is no such
// consent not yet revoked. The id may be given by its first 8 or more
// characters when that names one consent.
func (t *Tx) RevokeConsent(ctx context.Context, id string, conv core.ConversationID, actor core.IdentityID) (string, bool, error) {
	if len(id) < 8 {
		return "", false, nil
	}
	var full string
	err := t.queryRow(ctx, `UPDATE consents SET revoked_at = $3, revoked_by = $4
		WHERE id = (SELECT id FROM consents WHERE starts_with(id, $1) AND ($2 = '' OR conversation = $2) AND revoked_at IS NULL
			ORDER BY created_at DESC LIMIT 1)
		RETURNING id`, id, conv, t.now(), actor).Scan(&full)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("store: revoke consent %s: %w", id, err)
	}
	return full, true, nil
}

// RevokeConsent revokes consent id in its own transaction, audited
// (consent.revoked by actor): the CLI's `silas consents revoke`.
func (s *Store) RevokeConsent(ctx context.Context, id string, actor core.IdentityID) (string, bool, error) {
	var full string
	var ok bool
	err := s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		var err error
		full, ok, err = tx.RevokeConsent(ctx, id, "", actor)
		if err != nil || !ok {
			return nil, err
		}
		return []audit.Entry{{Kind: audit.KindConsentRevoked, Actor: string(actor), Data: map[string]any{"consent": full}}}, nil
	})
	return full, ok, err
}

// RunConsents reads, locked, the consents a flow step of run may use: the
// run's own (newest first) and, when the request names one, that one
// whatever its run — so the gate can say "another run's" rather than
// "none". Locking serialises two steps asking at once: the second sees
// the first's use and its in-flight row.
func (t *Tx) RunConsents(ctx context.Context, run, named string) ([]consent.Consent, error) {
	var out []consent.Consent
	if err := t.send(ctx, []extra{consentsRead("consents of run", &out, runConsentsSelect, run, named)}); err != nil {
		return nil, fmt.Errorf("store: consents of run %s: %w", run, err)
	}
	return out, nil
}

// runConsentsSelect reads, locked, run $1's consents and the one named $2.
const runConsentsSelect = consentSelect + ` WHERE (run_id = $1 AND scope = 'run') OR id = $2
	ORDER BY created_at DESC LIMIT 64 FOR UPDATE`

// InFlight returns the approval of the first execution of run's step
// under a consent (consent "" : under any), if there is one.
func (t *Tx) InFlight(ctx context.Context, run, step, consentID string) (core.ApprovalID, string, bool, error) {
	var id core.ApprovalID
	var by string
	err := t.queryRow(ctx, `SELECT approval_id, consent_id FROM consent_inflight
		WHERE run_id = $1 AND step = $2 AND ($3 = '' OR consent_id = $3) ORDER BY created_at LIMIT 1`, run, step, consentID).Scan(&id, &by)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, fmt.Errorf("store: in-flight step %s/%s: %w", run, step, err)
	}
	return id, by, true, nil
}

// OfferRunConsent records run's consent card as offered; false when the
// run was offered one already (a run is offered its card once).
func (t *Tx) OfferRunConsent(ctx context.Context, o consent.Offer) (bool, error) {
	g, err := json.Marshal(o.Grant)
	if err != nil {
		return false, fmt.Errorf("store: offer consent for run %s: %w", o.Run, err)
	}
	n, err := t.exec(ctx, `INSERT INTO consent_offers (run_id, conversation, grant_spec, signature, status, created_at)
		VALUES ($1, $2, $3::jsonb, $4, 'offered', $5) ON CONFLICT DO NOTHING`, o.Run, o.Conversation, string(g), o.Signature, t.now())
	if err != nil {
		return false, fmt.Errorf("store: offer consent for run %s: %w", o.Run, err)
	}
	return n.RowsAffected() == 1, nil
}

// HasRunConsentOffer reports whether run was offered its consent card.
func (t *Tx) HasRunConsentOffer(ctx context.Context, run string) (bool, error) {
	var ok bool
	if err := t.queryRow(ctx, `SELECT EXISTS (SELECT 1 FROM consent_offers WHERE run_id = $1)`, run).Scan(&ok); err != nil {
		return false, fmt.Errorf("store: consent offer of run %s: %w", run, err)
	}
	return ok, nil
}

// RunConsentOffer reads, locked, run's consent card as offered;
// core.ErrNotFound when there is none.
func (t *Tx) RunConsentOffer(ctx context.Context, run string) (consent.Offer, error) {
	var o consent.Offer
	var g []byte
	var by *string
	err := t.queryRow(ctx, `SELECT run_id, conversation, grant_spec::text, signature, status, consent_id FROM consent_offers
		WHERE run_id = $1 FOR UPDATE`, run).Scan(&o.Run, &o.Conversation, &g, &o.Signature, &o.Status, &by)
	if err != nil {
		return o, notFound(err)
	}
	if by != nil {
		o.Consent = *by
	}
	if err := json.Unmarshal(g, &o.Grant); err != nil {
		return o, fmt.Errorf("store: consent offer of run %s: %w", run, err)
	}
	return o, nil
}

// DecideRunConsentOffer closes run's open offer as accepted (minting
// consentID) or declined, by who; false when it was not open.
func (t *Tx) DecideRunConsentOffer(ctx context.Context, run, status, consentID string, who core.IdentityID) (bool, error) {
	var cid *string
	if consentID != "" {
		cid = &consentID
	}
	n, err := t.exec(ctx, `UPDATE consent_offers SET status = $2, consent_id = $3, decided_at = $4, decided_by = $5
		WHERE run_id = $1 AND status = 'offered'`, run, status, cid, t.now(), string(who))
	if err != nil {
		return false, fmt.Errorf("store: decide consent offer of run %s: %w", run, err)
	}
	return n.RowsAffected() == 1, nil
}

// ReofferRunConsent opens run's consent card again as o (a new grant and
// signature, the same conversation) once the consent prev it minted has
// expired; false when the card was not accepted with prev (declined, open,
// or accepted for another consent).
func (t *Tx) ReofferRunConsent(ctx context.Context, o consent.Offer, prev string) (bool, error) {
	g, err := json.Marshal(o.Grant)
	if err != nil {
		return false, fmt.Errorf("store: offer consent again for run %s: %w", o.Run, err)
	}
	n, err := t.exec(ctx, `UPDATE consent_offers SET grant_spec = $2::jsonb, signature = $3, status = 'offered', consent_id = NULL,
		created_at = $4, decided_at = NULL, decided_by = NULL
		WHERE run_id = $1 AND conversation = $5 AND status = 'accepted' AND consent_id = $6`, o.Run, string(g), o.Signature, t.now(), o.Conversation, prev)
	if err != nil {
		return false, fmt.Errorf("store: offer consent again for run %s: %w", o.Run, err)
	}
	return n.RowsAffected() == 1, nil
}

// RunStep is an action node's attempt of a flow run waiting on its card.
type RunStep struct {
	Node               string
	Iteration, Attempt int
	Approval           core.ApprovalID
}

// OpenRunSteps lists run's running action attempts whose request still
// waits for a tap, oldest first: what a consent minted by a tap on the
// run's consent card may approve at once.
func (t *Tx) OpenRunSteps(ctx context.Context, run string) ([]RunStep, error) {
	rows, err := t.query(ctx, `SELECT f.node, f.iteration, f.attempt, f.approval_id FROM flow_attempts f JOIN approvals a ON a.id = f.approval_id
		WHERE f.run_id = $1 AND f.status = 'running' AND a.status IN ('pending', 'confirming') ORDER BY f.started_at, f.node LIMIT 64`, run)
	if err != nil {
		return nil, fmt.Errorf("store: open steps of run %s: %w", run, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RunStep, error) {
		var s RunStep
		err := r.Scan(&s.Node, &s.Iteration, &s.Attempt, &s.Approval)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: open steps of run %s: %w", run, err)
	}
	return out, nil
}

// LockRunStep is RunConsents and InFlight (under any consent) in one round
// trip: the consents read locked, then — a later statement of the same
// batch, so with a snapshot taken after the lock — whether run's step
// already ran under a consent. A step that ran in a transaction which
// held the lock before is seen.
func (t *Tx) LockRunStep(ctx context.Context, run, named, step string) ([]consent.Consent, bool, error) {
	var cs []consent.Consent
	var ran bool
	err := t.send(ctx, []extra{
		consentsRead("consents of run", &cs, runConsentsSelect, run, named),
		{"in-flight step", func(b *pgx.Batch) {
			b.Queue(`SELECT EXISTS (SELECT 1 FROM consent_inflight WHERE run_id = $1 AND step = $2)`, run, step).QueryRow(func(row pgx.Row) error {
				return row.Scan(&ran)
			})
		}},
	})
	if err != nil {
		return nil, false, fmt.Errorf("store: consents of run %s, step %s: %w", run, step, err)
	}
	return cs, ran, nil
}

// useInFlight are the first two parts of a statement counting a use of a
// consent in flight: u, the use of consent $1 costing $2 units at $3, by
// compare-and-swap on its limits; c, the in-flight row of run $4's step
// $5 naming approval $6, only after that use (under its primary key).
const useInFlight = `WITH u AS (
			UPDATE consents SET uses = uses + 1, units = units + $2
			WHERE id = $1 AND revoked_at IS NULL AND expires_at > $3 AND uses < max_uses AND units + $2 <= cost_cap
			RETURNING uses, units),
		c AS (
			INSERT INTO consent_inflight (run_id, step, consent_id, approval_id, created_at)
			SELECT $4, $5, $1, $6, $3 FROM u
			ON CONFLICT DO NOTHING RETURNING 1)`

// UseConsentInFlight is UseConsent and ClaimInFlight in one statement:
// one use of consent id costing units counted by compare-and-swap on its
// limits and approval recorded as the first execution of (run, step,
// consent). used=false (nothing written) when the consent is revoked,
// expired, exhausted or capped by now; claimed=false when another
// transaction recorded the step first (the unique key decides; the use is
// then counted in this statement, and the caller rolls back).
func (t *Tx) UseConsentInFlight(ctx context.Context, id string, units int, run, step string, approval core.ApprovalID) (uses, total int, used, claimed bool, err error) {
	now := t.now()
	err = t.queryRow(ctx, useInFlight+`
		SELECT u.uses, u.units, EXISTS (SELECT 1 FROM c) FROM u`, id, units, now, run, step, approval).Scan(&uses, &total, &claimed)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, false, false, nil
	}
	if err != nil {
		return 0, 0, false, false, fmt.Errorf("store: use consent %s for step %s/%s: %w", id, run, step, err)
	}
	return uses, total, true, claimed, nil
}

// ApproveStepUnderConsent is UseConsentInFlight, TransitionApproval (to
// approved, recording the token) and ConsumeNonce in one statement, each
// part only when the one before it took effect: the use counted by
// compare-and-swap on the consent's limits (Used=false: refused by now,
// nothing written), the in-flight row under its primary key
// (Claimed=false: another transaction recorded the step first), the
// request's status by compare-and-swap from pending or confirming
// (Approved=false: no longer open) and the token's nonce under its
// unique keys (Fresh=false: consumed before, a replay). Anything short
// of all four is the caller's cue to fail the transaction — nothing of a
// partial write is committed. One round trip instead of three.
func (t *Tx) ApproveStepUnderConsent(ctx context.Context, u consent.StepUse) (consent.StepUsed, error) {
	var r consent.StepUsed
	if err := t.parent("consent use", u.Approval); err != nil {
		return r, err
	}
	now := t.now()
	from := []string{string(core.ApprovalPending), string(core.ApprovalConfirming)}
	err := t.queryRow(ctx, useInFlight+`,
		a AS (
			UPDATE approvals SET status = $7, decided_by = $8, decided_at = $3, token = $9,
				tap_traceparent = COALESCE(NULLIF($10, ''), tap_traceparent)
			WHERE id = $6 AND status = ANY($11) AND EXISTS (SELECT 1 FROM c)
			RETURNING 1),
		n AS (
			INSERT INTO token_nonces (nonce, token_id, approval_id, consumed_at)
			SELECT $12, $13, $6, $3 FROM a
			ON CONFLICT DO NOTHING RETURNING 1)
		SELECT u.uses, u.units, EXISTS (SELECT 1 FROM c), EXISTS (SELECT 1 FROM a), EXISTS (SELECT 1 FROM n) FROM u`,
		u.Consent, u.Units, now, u.Run, u.Step, u.Approval, string(core.ApprovalApproved), string(u.By), u.Token,
		tracing.Traceparent(ctx), from, u.Nonce, u.TokenID).Scan(&r.Uses, &r.Units, &r.Claimed, &r.Approved, &r.Fresh)
	if errors.Is(err, pgx.ErrNoRows) {
		return consent.StepUsed{}, nil
	}
	if err != nil {
		return consent.StepUsed{}, fmt.Errorf("store: approve %s under consent %s for step %s/%s: %w", u.Approval, u.Consent, u.Run, u.Step, err)
	}
	r.Used = true
	return r, nil
}

// QueueWithdrawApproval deletes request id, proposed (inserted) earlier in
// this transaction and referenced by nothing yet: a flow step found
// already run under a consent answers with its first execution instead,
// as if it had not been proposed again (core/flowconsent).
func (t *Tx) QueueWithdrawApproval(id core.ApprovalID) {
	t.later("withdraw approval", `DELETE FROM approvals WHERE id = $1 AND status = 'pending'`, id)
	delete(t.approvals, id)
}
