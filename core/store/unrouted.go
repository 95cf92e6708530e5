package store

import (
	"sync"

	"github.com/silas-gateway/silas/core"
)

// An edit of a card (an outbox update, or a tap's answer carrying the card)
// carries the card fan-out (routes.go's fanOutSQL): a second INSERT INTO
// outbox joined to approval_routes, in the same statement. When the card
// has no route it inserts nothing, but it is still planned, set up and run
// on every edit: ≈ 30 µs of PostgreSQL CPU each, two per executed action
// (the tap's answer and the final card). unroutedCards remembers the
// cards known to have no route, whose edits then go without it.
//
// What makes the knowledge safe to keep: an approval's routes are stored
// only with the approval, in the transaction that creates it (core/route's
// Delivery, core/engine and core/propose queue both together), under
// message keys made from its id (the status card's key is the id itself;
// a copy's is id@conversation); they are never added later (and only ever
// removed with their approval). So an approval whose creating transaction
// committed without a route for it has none, then or later: an edit of
// its card under its own key (on its channel) fans out to nobody. Only
// committed creations are remembered (a rolled-back one may be retried
// with routes), by this process only — another instance's cards just run
// the fan-out as before.
type unroutedCards struct {
	mu   sync.Mutex
	keys map[cardKey]struct{}
	// ring holds the keys in insertion order: the oldest is forgotten once
	// unroutedCap are held (a card tapped much later fans out as before).
	ring []cardKey
	next int
}

// cardKey is a card's message: its channel and message key.
type cardKey struct {
	ch  core.ChannelName
	key string
}

// unroutedCap bounds the memory (≈ 150 B a key, ≈ 80 kB): enough for every card a
// burst of approvals creates before its taps come in.
const unroutedCap = 512

func (u *unroutedCards) has(ch core.ChannelName, key string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	_, ok := u.keys[cardKey{ch, key}]
	return ok
}

func (u *unroutedCards) add(keys []cardKey) {
	if len(keys) == 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.keys == nil {
		u.keys = make(map[cardKey]struct{}, len(keys))
	}
	for _, k := range keys {
		if _, ok := u.keys[k]; ok {
			continue
		}
		if len(u.ring) < unroutedCap {
			u.ring = append(u.ring, k)
		} else {
			delete(u.keys, u.ring[u.next])
			u.ring[u.next] = k
			u.next = (u.next + 1) % unroutedCap
		}
		u.keys[k] = struct{}{}
	}
}

// unroutedCreated are the cards of the approvals this transaction created
// without a route (see unroutedCards), for the store to remember once it
// committed.
func (t *Tx) unroutedCreated() []cardKey {
	var out []cardKey
	for _, c := range t.created {
		if !t.routed[c.key] && !t.routedKeys[c] {
			out = append(out, c)
		}
	}
	return out
}

// fansOut reports whether an edit of (ch, key) may fan out: false only for
// a card known to have no route.
func (t *Tx) fansOut(ch core.ChannelName, key string) bool {
	return t.noRoutes == nil || !t.noRoutes.has(ch, key)
}
