package kit

import (
	"crypto/sha256"
	"sync"
	"time"

	"github.com/silas-gateway/silas/core"
)

// SplitText splits s into parts of at most max, measured by width
// (core.SplitText; an adapter passes its platform's own measure, for
// example the UTF-16 length once escaped).
func SplitText(s string, max int, width func(rune) int) []string {
	return core.SplitText(s, max, width)
}

func measure(s string, width func(rune) int) int { return core.TextWidth(s, width) }

// Splits remembers how far the sending of a message split into several
// platform messages got, so the outbox's retry of a failed Send skips the
// parts already shown instead of repeating them. Progress lives in memory:
// after a restart a retried message is sent whole again, which repeats
// parts but loses none.
type Splits struct {
	now   func() time.Time
	mu    sync.Mutex
	m     map[[32]byte]*splitProgress
	swept time.Time // last prune (Send prunes at most once a minute)
}

// splitMaxAge is how long a message's progress is kept: far longer than
// the outbox retries one message.
const splitMaxAge = time.Hour

type splitProgress struct {
	sent  int
	first core.MessageRef
	at    time.Time
}

// NewSplits returns an empty tracker using now (time.Now when nil).
func NewSplits(now func() time.Time) *Splits {
	if now == nil {
		now = time.Now
	}
	return &Splits{now: now, m: map[[32]byte]*splitProgress{}}
}

// SplitKey identifies an outbound message across the outbox's retries.
func SplitKey(m core.OutMessage) [32]byte {
	h := sha256.New()
	h.Write([]byte(m.Conversation))
	h.Write([]byte{0})
	h.Write([]byte(m.Text))
	h.Write([]byte{0})
	if m.Card != nil {
		h.Write([]byte(m.Card.ID))
	}
	var k [32]byte
	copy(k[:], h.Sum(nil))
	return k
}

// Send sends parts 0..n-1 of the message key with send, starting after the
// parts an earlier attempt already sent, and returns the refs of the first
// and the last part. On an error the progress so far is kept for the retry.
func (s *Splits) Send(key [32]byte, n int, send func(i int) (core.MessageRef, error)) (first, last core.MessageRef, err error) {
	s.mu.Lock()
	p := s.m[key]
	if p == nil {
		p = &splitProgress{}
		s.m[key] = p
	}
	p.at = s.now()
	// Progress is pruned here, on use, rather than by a timer of its own:
	// the map only grows when Send is called.
	if p.at.Sub(s.swept) > time.Minute {
		s.prune(p.at, splitMaxAge)
		s.swept = p.at
	}
	start := p.sent
	first = p.first
	s.mu.Unlock()
	for i := start; i < n; i++ {
		r, err := send(i)
		if err != nil {
			return "", "", err
		}
		last = r
		s.mu.Lock()
		p.sent = i + 1
		if i == 0 {
			p.first, first = r, r
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	delete(s.m, key)
	s.mu.Unlock()
	return first, last, nil
}

// Sweep forgets progress older than maxAge (a message the outbox gave up
// on).
func (s *Splits) Sweep(maxAge time.Duration) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prune(now, maxAge)
}

// prune drops progress older than maxAge; called with s.mu held.
func (s *Splits) prune(now time.Time, maxAge time.Duration) {
	for k, p := range s.m {
		if now.Sub(p.at) > maxAge {
			delete(s.m, k)
		}
	}
}

// Len is the number of messages with progress kept.
func (s *Splits) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
