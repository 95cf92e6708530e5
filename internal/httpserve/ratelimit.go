package httpserve

import (
	"math"
	"sync"
	"time"
)

// RateLimiter is a token bucket per key: Burst at once, then one more
// every Every. It remembers at most MaxKeys keys; when all are in use a
// new key is refused (fail closed) rather than an old one forgotten.
type RateLimiter struct {
	Burst   int
	Every   time.Duration
	MaxKeys int

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// Allow takes one token for key at now.
func (l *RateLimiter) Allow(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buckets == nil {
		l.buckets = map[string]*bucket{}
	}
	burst := float64(max(l.Burst, 1))
	b, ok := l.buckets[key]
	if !ok {
		if l.MaxKeys > 0 && len(l.buckets) >= l.MaxKeys {
			l.prune(now)
			if len(l.buckets) >= l.MaxKeys {
				return false
			}
		}
		b = &bucket{tokens: burst, last: now}
		l.buckets[key] = b
	}
	if el := now.Sub(b.last); el > 0 {
		b.tokens = math.Min(burst, b.tokens+float64(el)/float64(l.Every))
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// prune forgets buckets that have refilled completely.
func (l *RateLimiter) prune(now time.Time) {
	full := time.Duration(float64(max(l.Burst, 1)) * float64(l.Every))
	for k, b := range l.buckets {
		if now.Sub(b.last) >= full {
			delete(l.buckets, k)
		}
	}
}

// Forget drops key's bucket (a session that ended).
func (l *RateLimiter) Forget(key string) {
	l.mu.Lock()
	delete(l.buckets, key)
	l.mu.Unlock()
}
