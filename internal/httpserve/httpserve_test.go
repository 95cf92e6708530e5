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
	t.Helper()
	ln, err := Listen("127.0.0.1:0", l)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(h, l)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
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
		"idle keep-alive": func(c net.Conn) error {
			if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", addr); err != nil {
				return err
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			return resp.Body.Close()
		},
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
