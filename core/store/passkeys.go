package store

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

// Passkeys (core/stepup): registered WebAuthn credentials and the one-time
// links of the secure form that register one or confirm an irreversible
// action with one. Only public keys and SHA-256 hashes of link tokens are
// stored.

// Passkey is one registered WebAuthn credential of an owner identity.
type Passkey struct {
	CredentialID []byte
	Owner        core.IdentityID
	Name         string
	// Credential is the WebAuthn library's record as JSON (public key,
	// flags, AAGUID): nothing secret.
	Credential []byte
	SignCount  int64
	CreatedAt  time.Time
	LastUsedAt time.Time
}

// Passkey link kinds.
const (
	PasskeyLinkEnroll = "enroll"
	PasskeyLinkStepUp = "stepup"
)

// PasskeyLink is a one-time link of the secure form for passkeys.
type PasskeyLink struct {
	Ref       string
	Kind      string
	TokenHash []byte
	Owner     core.IdentityID
	// Name is the passkey's name (enroll).
	Name string
	// Approval is the request a step-up confirms ("" for enroll).
	Approval core.ApprovalID
	// Nonce is the registration challenge (enroll) or the nonce of the
	// step-up challenge.
	Nonce     []byte
	CreatedAt time.Time
	ExpiresAt time.Time
	UsedAt    time.Time
}

// LinkOutcome is what using a link found.
type LinkOutcome int

const (
	// LinkUsable: the link was pending and is now marked used.
	LinkUsable LinkOutcome = iota
	// LinkNotFound: no such link, or the token does not match (the same
	// answer, so a ref alone reveals nothing).
	LinkNotFound
	// LinkUsed: the link was used before.
	LinkUsed
	// LinkExpired: the link is past its expiry.
	LinkExpired
)

const passkeyLinkSelect = `SELECT ref, kind, token_hash, owner, name, COALESCE(approval, ''), nonce, created_at, expires_at, used_at FROM passkey_links`

func scanPasskeyLink(row pgx.Row) (PasskeyLink, error) {
	var l PasskeyLink
	var used *time.Time
	if err := row.Scan(&l.Ref, &l.Kind, &l.TokenHash, &l.Owner, &l.Name, &l.Approval, &l.Nonce, &l.CreatedAt, &l.ExpiresAt, &used); err != nil {
		return PasskeyLink{}, notFound(err)
	}
	if used != nil {
		l.UsedAt = *used
	}
	return l, nil
}

// StateAt says what using link l at now would find, after its token was
// checked.
func (l PasskeyLink) StateAt(now time.Time) LinkOutcome {
	switch {
	case !l.UsedAt.IsZero():
		return LinkUsed
	case !now.Before(l.ExpiresAt):
		return LinkExpired
	}
	return LinkUsable
}

// InsertPasskeyLink stores a new link and returns its audit entry
// (passkey.enroll_link or stepup.offered), carrying the ref, never the
// token.
func (t *Tx) InsertPasskeyLink(ctx context.Context, l PasskeyLink, conv core.ConversationID) ([]audit.Entry, error) {
	if l.CreatedAt.IsZero() {
		l.CreatedAt = t.now()
	}
	if !l.ExpiresAt.After(l.CreatedAt) {
		return nil, fmt.Errorf("store: passkey link %s expires before it is created", l.Ref)
	}
	var approval *string
	if l.Approval != "" {
		s := string(l.Approval)
		approval = &s
	}
	_, err := t.exec(ctx, `INSERT INTO passkey_links (ref, kind, token_hash, owner, name, approval, nonce, created_at, expires_at)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)`, l.Ref, l.Kind, l.TokenHash, l.Owner, l.Name, approval, l.Nonce, l.CreatedAt, l.ExpiresAt)
	if err != nil {
		return nil, fmt.Errorf("store: insert passkey link: %w", err)
	}
	data := map[string]any{"ref": l.Ref, "owner": string(l.Owner), "expires_at": audit.Truncate(l.ExpiresAt).Format(audit.TimeFormat)}
	kind := audit.KindPasskeyEnrollLink
	if l.Kind == PasskeyLinkStepUp {
		kind = audit.KindStepUpOffered
		data["approval"] = string(l.Approval)
	} else {
		data["name"] = l.Name
	}
	return []audit.Entry{{Kind: kind, Actor: string(l.Owner), Conversation: string(conv), Data: data}}, nil
}

// UsePasskeyLink checks link ref of kind against tokenHash and, when it is
// usable, marks it used (compare-and-swap on a locked row): a link works
// once, whatever the attempt then finds. The link is returned for every
// outcome but LinkNotFound.
func (t *Tx) UsePasskeyLink(ctx context.Context, ref, kind string, tokenHash []byte) (LinkOutcome, PasskeyLink, error) {
	l, err := scanPasskeyLink(t.queryRow(ctx, passkeyLinkSelect+` WHERE ref = $1 AND kind = $2 FOR UPDATE`, ref, kind))
	if errors.Is(err, core.ErrNotFound) {
		return LinkNotFound, PasskeyLink{}, nil
	}
	if err != nil {
		return 0, PasskeyLink{}, fmt.Errorf("store: passkey link: %w", err)
	}
	if len(tokenHash) != len(l.TokenHash) || subtle.ConstantTimeCompare(tokenHash, l.TokenHash) != 1 {
		return LinkNotFound, PasskeyLink{}, nil
	}
	now := t.now()
	if o := l.StateAt(now); o != LinkUsable {
		return o, l, nil
	}
	tag, err := t.exec(ctx, `UPDATE passkey_links SET used_at = $2 WHERE ref = $1 AND used_at IS NULL AND expires_at > $2`, ref, now)
	if err != nil {
		return 0, PasskeyLink{}, fmt.Errorf("store: use passkey link: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return LinkUsed, l, nil // unreachable while the row is locked
	}
	l.UsedAt = now
	return LinkUsable, l, nil
}

// GetPasskeyLink reads a link by ref (core.ErrNotFound if none).
func (s *Store) GetPasskeyLink(ctx context.Context, ref string) (PasskeyLink, error) {
	l, err := scanPasskeyLink(s.pool.QueryRow(ctx, passkeyLinkSelect+` WHERE ref = $1`, ref))
	if err != nil && !errors.Is(err, core.ErrNotFound) {
		return l, fmt.Errorf("store: get passkey link: %w", err)
	}
	return l, err
}

const passkeySelect = `SELECT credential_id, owner, name, credential, sign_count, created_at, last_used_at FROM passkeys`

func scanPasskeys(rows pgx.Rows, err error) ([]Passkey, error) {
	if err != nil {
		return nil, fmt.Errorf("store: passkeys: %w", err)
	}
	defer rows.Close()
	var out []Passkey
	for rows.Next() {
		var p Passkey
		var last *time.Time
		if err := rows.Scan(&p.CredentialID, &p.Owner, &p.Name, &p.Credential, &p.SignCount, &p.CreatedAt, &last); err != nil {
			return nil, fmt.Errorf("store: passkeys: %w", err)
		}
		if last != nil {
			p.LastUsedAt = *last
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: passkeys: %w", err)
	}
	return out, nil
}

// Passkeys lists the passkeys of owner, or every owner's for "", oldest
// first.
func (s *Store) Passkeys(ctx context.Context, owner core.IdentityID) ([]Passkey, error) {
	return scanPasskeys(s.pool.Query(ctx, passkeySelect+` WHERE $1 = '' OR owner = $1 ORDER BY created_at, credential_id`, owner))
}

// PasskeysOf lists owner's passkeys inside the transaction, locking them:
// an assertion's sign count is checked and moved on under the lock.
func (t *Tx) PasskeysOf(ctx context.Context, owner core.IdentityID) ([]Passkey, error) {
	return scanPasskeys(t.query(ctx, passkeySelect+` WHERE owner = $1 ORDER BY created_at, credential_id FOR UPDATE`, owner))
}

// ErrPasskeyExists: the credential is registered already.
var ErrPasskeyExists = errors.New("store: this passkey is registered already")

// InsertPasskey stores a newly registered passkey and returns its audit
// entry, passkey.registered (owner, name, credential id; no key).
func (t *Tx) InsertPasskey(ctx context.Context, p Passkey, credIDText string) ([]audit.Entry, error) {
	if p.CreatedAt.IsZero() {
		p.CreatedAt = t.now()
	}
	_, err := t.exec(ctx, `INSERT INTO passkeys (credential_id, owner, name, credential, sign_count, created_at) VALUES ($1,$2,$3,$4,$5,$6)`,
		p.CredentialID, p.Owner, p.Name, p.Credential, p.SignCount, p.CreatedAt)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return nil, ErrPasskeyExists
	}
	if err != nil {
		return nil, fmt.Errorf("store: insert passkey: %w", err)
	}
	return []audit.Entry{{Kind: audit.KindPasskeyRegistered, Actor: string(p.Owner), Data: map[string]any{
		"owner": string(p.Owner), "name": p.Name, "credential": credIDText, "sign_count": p.SignCount}}}, nil
}

// AdvancePasskey records an accepted assertion: the new sign count and
// credential record, compare-and-swap on the count read under the lock
// (false: it moved meanwhile, which the caller refuses as a replay).
func (t *Tx) AdvancePasskey(ctx context.Context, credentialID []byte, from, to int64, credential []byte) (bool, error) {
	tag, err := t.exec(ctx, `UPDATE passkeys SET sign_count = $3, credential = $4, last_used_at = $5
		WHERE credential_id = $1 AND sign_count = $2`, credentialID, from, to, credential, t.now())
	if err != nil {
		return false, fmt.Errorf("store: advance passkey: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// RemovePasskeys deletes the passkeys of owner that match reports true
// for, and returns how many went, with one passkey.removed entry each.
func (t *Tx) RemovePasskeys(ctx context.Context, owner core.IdentityID, match func(Passkey) bool, actor string) (int, []audit.Entry, error) {
	keys, err := t.PasskeysOf(ctx, owner)
	if err != nil {
		return 0, nil, err
	}
	var entries []audit.Entry
	for _, p := range keys {
		if !match(p) {
			continue
		}
		if _, err := t.exec(ctx, `DELETE FROM passkeys WHERE credential_id = $1`, p.CredentialID); err != nil {
			return 0, nil, fmt.Errorf("store: remove passkey: %w", err)
		}
		entries = append(entries, audit.Entry{Kind: audit.KindPasskeyRemoved, Actor: actor, Data: map[string]any{
			"owner": string(owner), "name": p.Name}})
	}
	return len(entries), entries, nil
}

// SweepPasskeyLinks deletes up to limit links that expired, or were used,
// before cutoff, and returns how many it deleted. A link being used right
// now (its row locked by UsePasskeyLink) is skipped, never waited for, so
// sweeps on several instances and the pages never block one another; the
// next sweep takes what was skipped.
func (s *Store) SweepPasskeyLinks(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM passkey_links WHERE ref IN (
		SELECT ref FROM passkey_links WHERE expires_at < $1 OR used_at < $1
		ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)`, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("store: sweep passkey links: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
