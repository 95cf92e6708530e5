package llm

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// What a server may ask for before a retry, read as openai-go v3.96.0
// read it (the SDK the client replaced): Retry-After-Ms before
// Retry-After, seconds or an HTTP date, and an ask beyond the maximum
// delay ends the retries.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC1123)
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC1123)
	tests := []struct {
		name     string
		header   map[string]string
		max      time.Duration
		want     time.Duration
		ok, long bool
	}{
		{"none", nil, 8 * time.Second, 0, false, false},
		{"ms", map[string]string{"Retry-After-Ms": "250"}, 8 * time.Second, 250 * time.Millisecond, true, false},
		{"ms before seconds", map[string]string{"Retry-After-Ms": "10", "Retry-After": "3"}, 8 * time.Second, 10 * time.Millisecond, true, false},
		{"seconds", map[string]string{"Retry-After": "1.5"}, 8 * time.Second, 1500 * time.Millisecond, true, false},
		{"seconds at the maximum", map[string]string{"Retry-After": "8"}, 8 * time.Second, 8 * time.Second, true, false},
		{"seconds beyond the maximum", map[string]string{"Retry-After": "9"}, 8 * time.Second, 0, true, true},
		{"ms beyond the maximum", map[string]string{"Retry-After-Ms": "60000"}, 8 * time.Second, 0, true, true},
		{"overflow", map[string]string{"Retry-After": "1e400"}, 8 * time.Second, 0, true, true},
		{"negative is skipped", map[string]string{"Retry-After-Ms": "-5", "Retry-After": "2"}, 8 * time.Second, 2 * time.Second, true, false},
		{"not a number is skipped", map[string]string{"Retry-After-Ms": "soon"}, 8 * time.Second, 0, false, false},
		{"date in the past", map[string]string{"Retry-After": past}, 8 * time.Second, 0, true, false},
		{"date beyond the maximum", map[string]string{"Retry-After": future}, 8 * time.Second, 0, true, true},
		{"no maximum: two minutes", map[string]string{"Retry-After": "119"}, 0, 119 * time.Second, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := &http.Response{Header: http.Header{}}
			for k, v := range tt.header {
				res.Header.Set(k, v)
			}
			d, ok, long := retryAfter(res, tt.max)
			if d != tt.want || ok != tt.ok || long != tt.long {
				t.Fatalf("retryAfter = %v, %t, %t; want %v, %t, %t", d, ok, long, tt.want, tt.ok, tt.long)
			}
		})
	}
}

// Without a server's ask, the wait doubles from half a second, capped by
// the maximum, less up to a quarter of jitter.
func TestRetryBackoff(t *testing.T) {
	t.Parallel()
	for n, full := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second, 8 * time.Second} {
		for range 20 {
			d, again := retryDelay(nil, n, 8*time.Second)
			if !again || d > full || d < full-full/4 {
				t.Fatalf("retry %d: %v, %t; want within (%v, %v]", n, d, again, full-full/4, full)
			}
		}
	}
}

func TestShouldRetry(t *testing.T) {
	t.Parallel()
	res := func(status int, h ...string) *http.Response {
		r := &http.Response{StatusCode: status, Header: http.Header{}}
		if len(h) == 1 {
			r.Header.Set("X-Should-Retry", h[0])
		}
		return r
	}
	tests := []struct {
		name string
		res  *http.Response
		err  error
		want bool
	}{
		{"connection error", nil, errors.New("connection refused"), true},
		{"wrong origin", nil, errWrongOrigin, false},
		{"408", res(408), nil, true}, {"409", res(409), nil, true}, {"429", res(429), nil, true}, {"500", res(500), nil, true}, {"503", res(503), nil, true},
		{"400", res(400), nil, false}, {"401", res(401), nil, false}, {"404", res(404), nil, false}, {"200", res(200), nil, false},
		{"server says no", res(503, "false"), nil, false},
		{"server says yes", res(400, "true"), nil, true},
	}
	for _, tt := range tests {
		if got := shouldRetry(tt.res, tt.err); got != tt.want {
			t.Errorf("%s: shouldRetry = %t, want %t", tt.name, got, tt.want)
		}
	}
}

// A redirect to another origin is not followed: the API key goes to the
// configured endpoint only. A redirect on the same origin is.
func TestRedirectStaysOnOrigin(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
	}))
	t.Cleanup(other.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/chat/completions":
			http.Redirect(w, r, other.URL+"/v1/chat/completions", http.StatusTemporaryRedirect)
		case "/v1/models":
			http.Redirect(w, r, "/v2/models", http.StatusFound)
		case "/v2/models":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"data":[{"id":"moved"}]}`))
		}
	}))
	t.Cleanup(srv.Close)
	c, err := New(Config{BaseURL: srv.URL + "/v1", APIKey: "sk-test-0123456789", MaxRetries: 2, MaxRetryDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Chat(context.Background(), Request{Model: "m", Messages: []Message{{Role: RoleUser, Content: "hi"}}})
	if err == nil || !strings.Contains(err.Error(), "origin") || elsewhere.Load() != 0 {
		t.Fatalf("err = %v, %d requests elsewhere", err, elsewhere.Load())
	}
	if ids, err := c.ListModels(context.Background()); err != nil || len(ids) != 1 || ids[0] != "moved" {
		t.Fatalf("ListModels = %v, %v", ids, err)
	}
}

// The proxy's request with a full history window of ordinary messages
// fits the connection's write buffer with room for the headers, so it
// goes to the endpoint in one write (writeBuffer says why).
func TestWriteBufferHoldsARequest(t *testing.T) {
	t.Parallel()
	msgs := []Message{{Role: RoleSystem, Content: ProxyPrompt}}
	for i := range DefaultHistoryMessages {
		role := RoleUser
		if i%2 == 1 {
			role = RoleAssistant
		}
		msgs = append(msgs, Message{Role: role, Content: strings.Repeat("an ordinary chat message ", 12)})
	}
	body, err := encodeRequest(Request{Model: "gpt-4o-mini", Messages: msgs, Tools: offeredTools(ToolOptions{Planner: true}), ToolChoice: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	const headers = 1 << 10
	if got := keepAliveTransport().WriteBufferSize; len(body)+headers > got {
		t.Fatalf("a %d-byte request and its headers do not fit the %d-byte write buffer", len(body), got)
	}
}

// An answer that is not JSON, or not an object, fails Chat and ListModels
// with an error that says so.
func TestAnswerNotJSON(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{`{"choices":[`: "the answer is not JSON: unexpected end of JSON input", `[]`: "the answer is not a JSON object"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(body))
		}))
		c, err := New(Config{BaseURL: srv.URL + "/v1"})
		if err != nil {
			t.Fatal(err)
		}
		_, cerr := c.Chat(context.Background(), Request{Model: "m", Messages: []Message{{Role: RoleUser, Content: "hi"}}})
		_, lerr := c.ListModels(context.Background())
		srv.Close()
		for _, err := range []error{cerr, lerr} {
			if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "not JSON: the answer") {
				t.Errorf("%s: err = %v, want %q", body, err, want)
			}
		}
	}
}
