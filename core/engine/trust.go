package engine

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/store"
)

// trustBook computes trust from evidence and identity bindings. Bindings
// come from config (owners, allowlist) and from pairing records signed with
// the gateway key; a record whose signature does not verify, or that does
// not match its row, grants nothing.
type trustBook struct {
	st      *store.Store
	pub     ed25519.PublicKey
	owners  map[core.IdentityID]bool
	allowed map[core.IdentityID]bool
	now     func() time.Time

	mu       sync.Mutex
	bindings map[core.IdentityID]string
	loadedAt time.Time
}

const bindingCacheTTL = 5 * time.Second

func newTrustBook(st *store.Store, pub ed25519.PublicKey, owners, allowed []core.IdentityID, now func() time.Time) *trustBook {
	tb := &trustBook{st: st, pub: pub, owners: map[core.IdentityID]bool{}, allowed: map[core.IdentityID]bool{}, now: now}
	for _, o := range owners {
		tb.owners[o] = true
	}
	for _, a := range allowed {
		tb.allowed[a] = true
	}
	return tb
}

func (tb *trustBook) invalidate() {
	tb.mu.Lock()
	tb.bindings = nil
	tb.mu.Unlock()
}

// Of returns the trust of a turn's sender and the basis for the audit log.
func (tb *trustBook) Of(ctx context.Context, t core.Turn) (core.Trust, string) {
	if !t.Evidence.Authenticated {
		return core.TrustExternal, "unauthenticated"
	}
	if tb.owners[t.Sender] {
		return core.TrustOwner, "config owner"
	}
	switch tb.binding(ctx, t.Sender) {
	case "owner":
		return core.TrustOwner, "signed pairing record"
	case "auth":
		return core.TrustAuth, "signed pairing record"
	}
	if tb.allowed[t.Sender] {
		return core.TrustAuth, "config allowlist"
	}
	return core.TrustExternal, "no binding"
}

func (tb *trustBook) binding(ctx context.Context, id core.IdentityID) string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if tb.bindings == nil || tb.now().Sub(tb.loadedAt) > bindingCacheTTL {
		rows, err := tb.st.Bindings(ctx)
		if err != nil {
			// Fail closed: without bindings nobody gets paired trust.
			slog.Error("trust: loading bindings failed", slog.Any("err", err))
			return ""
		}
		m := make(map[core.IdentityID]string, len(rows))
		for _, b := range rows {
			var rec pairingRecord
			if !ed25519.Verify(tb.pub, b.Record, b.Signature) || json.Unmarshal(b.Record, &rec) != nil ||
				rec.Identity != string(b.Identity) || rec.Role != b.Role {
				slog.Warn("trust: ignoring identity binding with a bad signature", slog.String("identity", string(b.Identity)))
				continue
			}
			m[b.Identity] = b.Role
		}
		tb.bindings, tb.loadedAt = m, tb.now()
	}
	return tb.bindings[id]
}

// ownersBound lists identities with a valid owner binding.
func (tb *trustBook) ownersBound(ctx context.Context) []core.IdentityID {
	tb.binding(ctx, "") // refresh the cache if stale
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var out []core.IdentityID
	for id, role := range tb.bindings {
		if role == "owner" {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}
