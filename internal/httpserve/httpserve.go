// Package httpserve builds Silas's HTTP servers so that every listener
// (web chat and ops, secure form, webhooks) holds up under slow and idle
// clients: read, write, idle and header timeouts, a header size limit, a
// cap on concurrent connections, a Host check against DNS rebinding on
// loopback listeners, and a small token-bucket rate limiter.
//
// It must never serve anything itself: it only wraps handlers and
// listeners.
package httpserve

import (
	"errors"
	"net"
	"net/http"
	"sync"
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
	// MaxConns caps concurrent connections (512); further clients wait in
	// the kernel's accept queue until a slot frees.
	MaxConns int
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
// header size. Serve it on Listen's listener (which applies MaxConns).
func NewServer(h http.Handler, l Limits) *http.Server {
	l = l.WithDefaults()
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}

// Listen listens on addr with at most l.MaxConns connections open at once.
func Listen(addr string, l Limits) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return LimitListener(ln, l.WithDefaults().MaxConns), nil
}

// LimitListener returns a listener that accepts at most n connections at
// once: Accept waits while n are open.
func LimitListener(ln net.Listener, n int) net.Listener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
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
