package httpserve

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func serve(t *testing.T, h http.Handler, l Limits) string {
	addr, _ := serveListener(t, h, l)
	return addr
}

func serveListener(t *testing.T, h http.Handler, l Limits) (string, *limitListener) {
	t.Helper()
	ln, err := Listen("127.0.0.1:0", l)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(h, l)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), ln.(*limitListener)
}

// waitForgotten waits until the listener holds no connection: a client
// that has read its response (or closed its socket) can be ahead of the
// server closing its end, and a connection the server still counts would
// change what the next step of a cap test tests.
func waitForgotten(t *testing.T, l *limitListener) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		l.mu.Lock()
		n := len(l.conns)
		l.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server still holds %d connections after their clients left", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Hundreds of idle and slow-body connections are closed by the configured
// timeouts while a normal client is still served.
func TestSlowAndIdleClientsAreClosed(t *testing.T) {
	l := Limits{ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond,
		WriteTimeout: time.Second, IdleTimeout: 300 * time.Millisecond, MaxConns: 400}
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		fmt.Fprint(w, "ok")
	}), l)

	const each = 100
	kinds := map[string]func(c net.Conn) error{
		// Connects and sends nothing.
		"idle": func(net.Conn) error { return nil },
		// Sends headers, then trickles a body it never finishes.
		"slow body": func(c net.Conn) error {
			_, err := fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: %s\r\nContent-Length: 100000\r\n\r\nx", addr)
			return err
		},
		// Half a header, never finished.
		"slow headers": func(c net.Conn) error {
			_, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nX-Slow: ", addr)
			return err
		},
		// One request, then an idle keep-alive connection.
		"idle keep-alive": func(c net.Conn) error { return keepAlive(c, addr, "/") },
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(kinds)*each)
	for name, start := range kinds {
		for range each {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatalf("%s: dial: %v", name, err)
			}
			t.Cleanup(func() { c.Close() })
			if err := start(c); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Generous bound: the server must close the connection
				// well before this (its timeouts are 300ms).
				c.SetReadDeadline(time.Now().Add(20 * time.Second))
				_, err := io.Copy(io.Discard, c)
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					errs <- fmt.Errorf("%s connection still open after 20s", name)
				}
			}()
		}
	}
	// Meanwhile a normal client is served.
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("normal client not served: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Fatalf("normal client got %q", body)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// At the connection cap, a new client waits until a slot frees.
func TestConnectionCap(t *testing.T) {
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }),
		Limits{MaxConns: 2, ReadHeaderTimeout: time.Minute, IdleTimeout: time.Minute})
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		defer c.Close()
	}
	got := make(chan error, 1)
	go func() {
		resp, err := (&http.Client{Timeout: 20 * time.Second}).Get("http://" + addr + "/")
		if err == nil {
			resp.Body.Close()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("served beyond the cap (err=%v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	held[0].Close()
	if err := <-got; err != nil {
		t.Fatalf("not served once a slot freed: %v", err)
	}
}

func TestHostCheck(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	tests := []struct {
		name, listen, host string
		extra              []string
		want               int
	}{
		{name: "listen address", listen: "127.0.0.1:8080", host: "127.0.0.1:8080", want: 200},
		{name: "localhost", listen: "127.0.0.1:8080", host: "localhost:8080", want: 200},
		{name: "ipv6 loopback", listen: "127.0.0.1:8080", host: "[::1]:8080", want: 200},
		{name: "case", listen: "127.0.0.1:8080", host: "LOCALHOST:8080", want: 200},
		{name: "rebound name", listen: "127.0.0.1:8080", host: "evil.example:8080", want: 421},
		{name: "rebound name without port", listen: "127.0.0.1:8080", host: "evil.example", want: 421},
		{name: "other port", listen: "127.0.0.1:8080", host: "localhost:9090", want: 421},
		{name: "empty", listen: "127.0.0.1:8080", host: "", want: 421},
		{name: "configured proxy name", listen: "127.0.0.1:8080", host: "silas.example.com", extra: []string{"silas.example.com"}, want: 200},
		{name: "configured name any port", listen: "localhost:8080", host: "silas.example.com:443", extra: []string{"silas.example.com"}, want: 200},
		{name: "not loopback: unchecked", listen: "0.0.0.0:8080", host: "anything.example", want: 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := HostCheck(ok, tc.listen, tc.extra...)
			r, _ := http.NewRequest("GET", "/metrics", nil)
			r.Host = tc.host
			w := &recorder{header: http.Header{}}
			h.ServeHTTP(w, r)
			if w.code == 0 {
				w.code = 200
			}
			if w.code != tc.want {
				t.Fatalf("Host %q on %s: %d, want %d", tc.host, tc.listen, w.code, tc.want)
			}
		})
	}
}

type recorder struct {
	header http.Header
	code   int
	body   strings.Builder
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = 200
	}
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(code int) { r.code = code }

func TestRateLimiter(t *testing.T) {
	l := &RateLimiter{Burst: 3, Every: time.Second, MaxKeys: 2}
	now := time.Unix(1000, 0)
	for i := range 3 {
		if !l.Allow("a", now) {
			t.Fatalf("request %d refused within the burst", i)
		}
	}
	if l.Allow("a", now) {
		t.Fatal("fourth request allowed")
	}
	if !l.Allow("a", now.Add(time.Second)) {
		t.Fatal("no token after a second")
	}
	if !l.Allow("b", now) || l.Allow("c", now) {
		t.Fatal("key cap not enforced")
	}
	if !l.Allow("c", now.Add(time.Hour)) {
		t.Fatal("refilled buckets were not pruned for a newcomer")
	}
}

// keepAlive sends one request on c and reads the answer, leaving c an idle
// keep-alive connection.
func keepAlive(c net.Conn, addr, path string) error {
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, addr); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// Issue 22 point 6: one client holding 512 idle keep-alive connections
// (the whole default max_connections) does not make the web chat, /healthz
// or webhooks unreachable: past its per-client cap its own oldest idle
// connections are closed. The idle timeout is an hour, so nothing here is
// freed by time.
func TestOneClientCannotTakeEveryConnection(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "chat") })
	mux.HandleFunc("POST /webhook/telegram", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hook") })
	addr := serve(t, mux, Limits{MaxConns: 512, MaxConnsPerClient: 64, IdleTimeout: time.Hour,
		ReadHeaderTimeout: time.Hour, ReadTimeout: time.Hour})

	for i := range 512 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		if err := keepAlive(c, addr, "/healthz"); err != nil {
			t.Fatalf("attacker connection %d not served: %v", i, err)
		}
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for _, req := range []struct{ method, path, want string }{
		{"GET", "/healthz", "ok"}, {"GET", "/", "chat"}, {"POST", "/webhook/telegram", "hook"},
	} {
		r, _ := http.NewRequest(req.method, "http://"+addr+req.path, strings.NewReader("{}"))
		resp, err := client.Do(r)
		if err != nil {
			t.Fatalf("%s %s unreachable while one client holds 512 idle connections: %v", req.method, req.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != req.want {
			t.Fatalf("%s %s = %q", req.method, req.path, body)
		}
	}
}

// At the per-client cap the client's oldest connection without a request
// (here: one that never sent anything) is closed for its newcomer; when
// every one of them is busy with a request, the newcomer is refused while
// the busy ones finish.
func TestPerClientCap(t *testing.T) {
	entered := make(chan struct{}, 4)
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		fmt.Fprint(w, "slow")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	addr, ln := serveListener(t, mux, Limits{MaxConns: 100, MaxConnsPerClient: 2, IdleTimeout: time.Hour,
		ReadHeaderTimeout: time.Hour, ReadTimeout: time.Hour})
	client := func() *http.Client {
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	}

	// Two silent connections: the newcomer pushes out the oldest.
	silent := make([]net.Conn, 2)
	for i := range silent {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent[i] = c
	}
	resp, err := client().Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("newcomer refused although the client's connections were idle: %v", err)
	}
	resp.Body.Close()
	silent[0].SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := silent[0].Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("oldest silent connection not closed (read: %v)", err)
	}
	silent[1].Close()
	waitForgotten(t, ln)

	// Two busy requests: the newcomer is refused, they complete. They start
	// one after the other: a connection that has not sent its request yet
	// is fair game for its own client's next one.
	done := make(chan error, 2)
	for range 2 {
		go func() {
			resp, err := client().Get("http://" + addr + "/slow")
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
		select {
		case <-entered:
		case err := <-done:
			t.Fatalf("busy request refused below the cap: %v", err)
		}
	}
	if resp, err := client().Get("http://" + addr + "/"); err == nil {
		resp.Body.Close()
		t.Fatal("a third connection was served while the client's two were busy")
	}
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("busy request cut off: %v", err)
		}
	}
	waitForgotten(t, ln)
	if resp, err := client().Get("http://" + addr + "/"); err != nil {
		t.Fatalf("not served once the busy requests finished: %v", err)
	} else {
		resp.Body.Close()
	}
}

// At the global cap the oldest idle keep-alive connection is closed for a
// newcomer from another client.
func TestGlobalCapClosesIdleKeepAlives(t *testing.T) {
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }),
		Limits{MaxConns: 2, IdleTimeout: time.Hour, ReadHeaderTimeout: time.Hour})
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := keepAlive(c, addr, "/"); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("newcomer not served at the cap of idle keep-alives: %v", err)
	}
	resp.Body.Close()
}
