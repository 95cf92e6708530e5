package trust

import (
	"context"
	"crypto/ed25519"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/silas-gateway/silas/core"
)

// Book computes trust from evidence and identity bindings. Bindings
// come from config (owners, allowlist) and from pairing records signed with
// the gateway key; a record whose signature does not verify, or that does
// not match its row, grants nothing.
type Book struct {
	st      Bindings
	pub     ed25519.PublicKey
	owners  map[core.IdentityID]bool
	allowed map[core.IdentityID]bool
	now     func() time.Time

	mu       sync.Mutex
	bindings map[core.IdentityID]string
	loadedAt time.Time
}

const bindingCacheTTL = 5 * time.Second

// Bindings is where a Book reads the stored identity bindings
// (the store implements it).
type Bindings interface {
	Bindings(ctx context.Context) ([]core.Binding, error)
}

// NewBook builds a Book over the stored bindings of st, the config's
// owners and allowlist, and the clock (bindings are cached for a few
// seconds).
func NewBook(st Bindings, pub ed25519.PublicKey, owners, allowed []core.IdentityID, now func() time.Time) *Book {
	tb := &Book{st: st, pub: pub, owners: map[core.IdentityID]bool{}, allowed: map[core.IdentityID]bool{}, now: now}
	for _, o := range owners {
		tb.owners[o] = true
	}
	for _, a := range allowed {
		tb.allowed[a] = true
	}
	return tb
}

// Invalidate drops the cached bindings (after a pairing committed).
func (tb *Book) Invalidate() {
	tb.mu.Lock()
	tb.bindings = nil
	tb.mu.Unlock()
}

// Of returns the trust of a turn's sender and the basis for the audit log.
func (tb *Book) Of(ctx context.Context, t core.Turn) (core.Trust, string) {
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

func (tb *Book) binding(ctx context.Context, id core.IdentityID) string {
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
			if !VerifyBinding(tb.pub, b.Identity, b.Role, b.Record, b.Signature) {
				slog.Warn("trust: ignoring identity binding with a bad signature", slog.String("identity", string(b.Identity)))
				continue
			}
			m[b.Identity] = b.Role
		}
		tb.bindings, tb.loadedAt = m, tb.now()
	}
	return tb.bindings[id]
}

// OwnersBound lists identities with a valid owner binding.
func (tb *Book) OwnersBound(ctx context.Context) []core.IdentityID {
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
