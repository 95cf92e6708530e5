package secretsweb

import (
	"math"
	"net"
	"sync"
	"time"
)

// RateLimit is a token bucket: Burst requests at once, then one more every
// Every.
type RateLimit struct {
	Burst int
	Every time.Duration
}

// limiter keeps one bucket per key (a client address or a request ref).
type limiter struct {
	mu      sync.Mutex
	limit   RateLimit
	maxKeys int
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newLimiter(l RateLimit, maxKeys int) *limiter {
	return &limiter{limit: l, maxKeys: maxKeys, buckets: map[string]*bucket{}}
}

// allow takes one token for key. When none is left it says how long until
// the next one.
func (l *limiter) allow(key string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	burst := float64(l.limit.Burst)
	b, ok := l.buckets[key]
	if !ok {
		if len(l.buckets) >= l.maxKeys {
			l.prune(now)
			if len(l.buckets) >= l.maxKeys {
				// Every bucket is in use: refuse newcomers rather than
				// forget a limited client (fail closed).
				return false, l.limit.Every
			}
		}
		b = &bucket{tokens: burst, last: now}
		l.buckets[key] = b
	}
	if el := now.Sub(b.last); el > 0 {
		b.tokens = math.Min(burst, b.tokens+float64(el)/float64(l.limit.Every))
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) * float64(l.limit.Every))
}

// prune forgets buckets that have refilled completely: they behave like new
// ones.
func (l *limiter) prune(now time.Time) {
	full := time.Duration(float64(l.limit.Burst) * float64(l.limit.Every))
	for k, b := range l.buckets {
		if now.Sub(b.last) >= full {
			delete(l.buckets, k)
		}
	}
}

// clientKey is the rate-limit key of a remote address: the IP, or its /64
// for IPv6 (one host usually owns a whole /64).
func clientKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}
