package approval

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/silas-gateway/silas/core/canon"
)

// The signed bytes of a request or a token are RFC 8785 JSON of the
// struct. They used to be made by marshalling the struct and canonicalising
// the result (a second parse); a tap computes them five times (the
// request's at the decision and at the gate, the token's when it is minted,
// checked and checked again at the gate), so they are now written directly,
// members in RFC 8785 order. The output is byte for byte what
// json.Marshal + canon.Transform gives (TestSigningBytesGolden,
// FuzzRequestSigningBytes, FuzzTokenSigningBytes); the marshalling path
// stays for what the direct writer does not handle (a year outside
// 0000–9999, which encoding/json refuses, or an integer beyond 2^53).

// maxExactInt is the largest integer an IEEE-754 double holds exactly;
// RFC 8785 writes numbers as doubles.
const maxExactInt = 1 << 53

func (r Request) appendCanonical(b []byte) ([]byte, bool) {
	if !jsonTime(r.CreatedAt) || !jsonTime(r.ExpiresAt) {
		return nil, false
	}
	b = append(b, `{"action_hash":`...)
	b = appendBase64(b, r.ActionHash)
	b = append(b, `,"approvers":`...)
	b = appendStrings(b, r.Approvers)
	b = append(b, `,"channel":`...)
	b = canon.AppendString(b, r.Channel)
	b = append(b, `,"conversation":`...)
	b = canon.AppendString(b, r.Conversation)
	b = append(b, `,"created_at":`...)
	b = appendTime(b, r.CreatedAt)
	b = append(b, `,"expires_at":`...)
	b = appendTime(b, r.ExpiresAt)
	b = append(b, `,"id":`...)
	b = canon.AppendString(b, r.ID)
	b = append(b, `,"intent":`...)
	b = canon.AppendString(b, r.Intent)
	if r.Preview != "" {
		b = append(b, `,"preview":`...)
		b = canon.AppendString(b, r.Preview)
	}
	b = append(b, `,"rationale":`...)
	b = canon.AppendString(b, r.Rationale)
	b = append(b, `,"requester":`...)
	b = canon.AppendString(b, r.Requester)
	b = append(b, `,"risk":`...)
	b = canon.AppendString(b, r.Risk)
	return append(b, '}'), true
}

// signingJSON is the request's canonical JSON through json.Marshal and
// canon.Transform: the reference the direct writer matches.
func (r Request) signingJSON() ([]byte, error) {
	raw, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("approval: marshal request: %w", err)
	}
	c, err := canon.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("approval: canonicalise request: %w", err)
	}
	return c, nil
}

func (t Token) appendCanonical(b []byte) ([]byte, bool) {
	if !jsonTime(t.IssuedAt) || !jsonTime(t.ExpiresAt) || t.MaxExecutions > maxExactInt || t.MaxExecutions < -maxExactInt {
		return nil, false
	}
	b = append(b, `{"action_hash":`...)
	b = appendBase64(b, t.ActionHash)
	b = append(b, `,"approver":`...)
	b = canon.AppendString(b, t.Approver)
	b = append(b, `,"conversation":`...)
	b = canon.AppendString(b, t.Conversation)
	b = append(b, `,"expires_at":`...)
	b = appendTime(b, t.ExpiresAt)
	b = append(b, `,"issued_at":`...)
	b = appendTime(b, t.IssuedAt)
	b = append(b, `,"max_executions":`...)
	b = strconv.AppendInt(b, int64(t.MaxExecutions), 10)
	b = append(b, `,"nonce":`...)
	b = appendBase64(b, t.Nonce)
	b = append(b, `,"scope":`...)
	b = canon.AppendString(b, t.Scope)
	b = append(b, `,"token_id":`...)
	b = canon.AppendString(b, t.TokenID)
	return append(b, '}'), true
}

// signingJSON is the token's canonical JSON through json.Marshal and
// canon.Transform: the reference the direct writer matches.
func (t Token) signingJSON() ([]byte, error) {
	raw, err := json.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("approval: marshal token: %w", err)
	}
	return canon.Transform(raw)
}

// jsonTime: encoding/json writes t (RFC 3339, which has four-digit years).
func jsonTime(t time.Time) bool {
	y := t.Year()
	return y >= 0 && y <= 9999
}

// appendTime writes t as encoding/json does (RFC 3339 with the fraction's
// trailing zeros cut); it has nothing RFC 8785 escapes.
func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// appendBase64 writes p as encoding/json does: standard base64, null for
// a nil slice.
func appendBase64(b []byte, p []byte) []byte {
	if p == nil {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, p)
	return append(b, '"')
}

func appendStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = canon.AppendString(b, s)
	}
	return append(b, ']')
}
