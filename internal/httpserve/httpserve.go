// Package httpserve builds Silas's HTTP servers so that every listener
// (web chat and ops, secure form, webhooks) holds up under slow and idle
// clients: read, write, idle and header timeouts, a header size limit, a
// cap on concurrent connections and a smaller one per client address (idle
// keep-alive connections are closed first when either is reached), a Host
// check against DNS rebinding on loopback listeners, and a small
// token-bucket rate limiter.
//
// It must never serve anything itself: it only wraps handlers and
// listeners.
package httpserve

import (
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Limits bound what one client can hold. Zero fields take the defaults of
// WithDefaults.
type Limits struct {
	// ReadHeaderTimeout bounds reading a request's headers (default 10s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included (30s).
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response (60s). Upgraded WebSockets
	// are exempt (ClearDeadlines): they have their own pings and deadlines.
	WriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection with no request (120s).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds request headers (64 KiB).
	MaxHeaderBytes int
	// MaxConns caps concurrent connections (512). At the cap the oldest
	// idle keep-alive connection is closed for a newcomer; when none is
	// idle, further clients wait until a slot frees.
	MaxConns int
	// MaxConnsPerClient caps the connections one client address holds
	// (zero, or MaxConns or more: no separate cap). At it, that client's oldest
	// connection without a request in progress is closed for its
	// newcomer; when every one is busy, the newcomer is refused. One
	// client thus cannot take every slot with idle connections.
	MaxConnsPerClient int
}

// WithDefaults fills zero fields.
func (l Limits) WithDefaults() Limits {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&l.ReadHeaderTimeout, 10*time.Second)
	def(&l.ReadTimeout, 30*time.Second)
	def(&l.WriteTimeout, 60*time.Second)
	def(&l.IdleTimeout, 120*time.Second)
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = 64 << 10
	}
	if l.MaxConns <= 0 {
		l.MaxConns = 512
	}
	return l
}

// NewServer returns an http.Server for h with the limits' timeouts and
// header size. Serve it on Listen's listener (which applies MaxConns): the
// server tells the listener which connections are idle.
func NewServer(h http.Handler, l Limits) *http.Server {
	l = l.WithDefaults()
	return &http.Server{
		ConnState:         trackState,
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}

// Listen listens on addr with at most l.MaxConns connections open at once
// and l.MaxConnsPerClient from one client address.
func Listen(addr string, l Limits) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l = l.WithDefaults()
	return LimitListenerPerClient(ln, l.MaxConns, l.MaxConnsPerClient), nil
}

// LimitListener returns a listener that accepts at most n connections at
// once (see LimitListenerPerClient; no per-client cap).
func LimitListener(ln net.Listener, n int) net.Listener {
	return LimitListenerPerClient(ln, n, n)
}

// LimitListenerPerClient returns a listener that holds at most n
// connections at once and perClient from one client address. Connections
// a server made by NewServer reports as idle (a kept-alive connection
// between requests, or one that has sent nothing yet) are closed, oldest
// first, to make room: at n, idle keep-alives of anyone; at perClient,
// that client's own. When nothing can be closed, a newcomer waits for a
// slot under n and is refused at perClient. perClient <= 0 or >= n means
// no per-client cap. Closing an idle connection
// loses nothing: no request is in progress on it, and HTTP clients open a
// new connection.
func LimitListenerPerClient(ln net.Listener, n, perClient int) net.Listener {
	if perClient <= 0 || perClient >= n {
		perClient = 0
	}
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), perClient: perClient,
		done: make(chan struct{}), byAddr: map[string]int{}}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	perClient int
	done      chan struct{}
	closeOnce sync.Once

	mu     sync.Mutex
	conns  []*limitConn   // open connections, oldest first
	byAddr map[string]int // open connections per client address
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitConn{Conn: c, l: l, addr: clientAddr(c)}
		lc.state.Store(stateUnknown)
		if !l.makeRoom(lc.addr) {
			c.Close() // every one of this client's connections is busy
			continue
		}
		if !l.acquire() {
			c.Close()
			return nil, net.ErrClosed
		}
		l.mu.Lock()
		l.conns = append(l.conns, lc)
		l.byAddr[lc.addr]++
		l.mu.Unlock()
		return lc, nil
	}
}

// makeRoom closes the oldest idle connection of addr when addr is at its
// cap, and reports false when addr is at its cap with none idle.
func (l *limitListener) makeRoom(addr string) bool {
	l.mu.Lock()
	if l.perClient == 0 || l.byAddr[addr] < l.perClient {
		l.mu.Unlock()
		return true
	}
	victim := l.oldestIdle(func(c *limitConn) bool { return c.addr == addr }, true)
	l.mu.Unlock()
	if victim == nil {
		return false
	}
	victim.Close()
	return true
}

// acquire takes a slot under the global cap: at once when one is free,
// else after closing the oldest idle keep-alive connection, else when one
// frees. It reports false when the listener is closed.
func (l *limitListener) acquire() bool {
	select {
	case l.sem <- struct{}{}:
		return true
	default:
	}
	l.mu.Lock()
	// Only kept-alive connections here, not fresh ones: at the global cap
	// a newcomer must not push out another client that is about to send
	// its first request.
	victim := l.oldestIdle(func(*limitConn) bool { return true }, false)
	l.mu.Unlock()
	if victim != nil {
		victim.Close()
	}
	select {
	case l.sem <- struct{}{}:
		return true
	case <-l.done:
		return false
	}
}

// oldestIdle returns the oldest connection that match accepts and that is
// idle between requests (or, with fresh, has not sent a request yet).
// Callers hold l.mu.
func (l *limitListener) oldestIdle(match func(*limitConn) bool, fresh bool) *limitConn {
	var oldestNew *limitConn
	for _, c := range l.conns {
		if !match(c) {
			continue
		}
		switch http.ConnState(c.state.Load()) {
		case http.StateIdle:
			return c
		case http.StateNew:
			if fresh && oldestNew == nil {
				oldestNew = c
			}
		}
	}
	return oldestNew
}

func (l *limitListener) forget(c *limitConn) {
	l.mu.Lock()
	for i, x := range l.conns {
		if x == c {
			l.conns = append(l.conns[:i], l.conns[i+1:]...)
			if l.byAddr[c.addr]--; l.byAddr[c.addr] <= 0 {
				delete(l.byAddr, c.addr)
			}
			break
		}
	}
	l.mu.Unlock()
	<-l.sem
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// clientAddr is the client's IP address (all its ports are one client).
func clientAddr(c net.Conn) string {
	a := c.RemoteAddr()
	if a == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// stateUnknown marks a connection no server has reported on yet: it is
// never closed as idle (a server not made by NewServer reports nothing).
const stateUnknown = -1

type limitConn struct {
	net.Conn
	l     *limitListener
	addr  string
	state atomic.Int32 // http.ConnState, as the server reported it
	once  sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.forget(c) })
	return err
}

// trackState records the server's view of each connection of a limit
// listener (http.Server.ConnState).
func trackState(c net.Conn, s http.ConnState) {
	if lc, ok := c.(*limitConn); ok {
		lc.state.Store(int32(s))
	}
}

// ClearDeadlines lifts the server's read and write deadlines from the
// connection of w before a WebSocket upgrade: the server's WriteTimeout
// would otherwise end every socket after that long. The WebSocket code
// then keeps its own deadlines (pings, per-write timeouts).
func ClearDeadlines(w http.ResponseWriter) error {
	rc := http.NewResponseController(w)
	err := rc.SetReadDeadline(time.Time{})
	if werr := rc.SetWriteDeadline(time.Time{}); err == nil {
		err = werr
	}
	if errors.Is(err, http.ErrNotSupported) {
		return nil // not a server connection (a test recorder)
	}
	return err
}
