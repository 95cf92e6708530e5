package telegram

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/silas-gateway/silas/adapters/telegram/telegramtest"
	"github.com/silas-gateway/silas/core"
)

// A body of unknown length reaches the server with a Content-Length and
// unchanged; one longer than sizedBodyMax still arrives whole (chunked, as
// before); an empty one arrives empty.
func TestSizedBodies(t *testing.T) {
	type seen struct {
		length   int64
		chunked  bool
		body     []byte
		reqCount int
	}
	var mu sync.Mutex
	var got seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = seen{length: r.ContentLength, chunked: len(r.TransferEncoding) > 0, body: b, reqCount: got.reqCount + 1}
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: sizedBodies{next: http.DefaultTransport}}
	for _, tc := range []struct {
		name        string
		size        int
		wantChunked bool
	}{
		{"empty", 0, false},
		{"a form", 3000, false},
		{"at the limit", sizedBodyMax, false},
		{"over the limit", sizedBodyMax + 10, true},
	} {
		want := bytes.Repeat([]byte("0123456789abcdef"), tc.size/16+1)[:tc.size]
		pr, pw := io.Pipe()
		go func() {
			// Written in small pieces, as the SDK's multipart writer does.
			for b := want; len(b) > 0; {
				n := min(len(b), 100)
				if _, err := pw.Write(b[:n]); err != nil {
					return
				}
				b = b[n:]
			}
			pw.Close()
		}()
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL, pr)
		if err != nil {
			t.Fatal(err)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		res.Body.Close()
		mu.Lock()
		g := got
		mu.Unlock()
		if !bytes.Equal(g.body, want) {
			t.Errorf("%s: the server read %d bytes, not the %d sent", tc.name, len(g.body), len(want))
		}
		if g.chunked != tc.wantChunked || (!tc.wantChunked && g.length != int64(tc.size)) {
			t.Errorf("%s: Content-Length %d, chunked %v; want %d, chunked %v", tc.name, g.length, g.chunked, tc.size, tc.wantChunked)
		}
		if req.ContentLength != 0 || req.Body != pr {
			t.Errorf("%s: the caller's request was changed", tc.name)
		}
	}
}

// recordLengths is a RoundTripper that notes each request's method (the
// URL's last element, never the URL: it holds the token) and length.
type recordLengths struct {
	mu      sync.Mutex
	lengths map[string][]int64
}

func (r *recordLengths) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	m := req.URL.Path[strings.LastIndexByte(req.URL.Path, '/')+1:]
	r.lengths[m] = append(r.lengths[m], req.ContentLength)
	r.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

// The SDK's requests (sendMessage here) leave the adapter with a
// Content-Length, not as a chunked stream of the form's pieces.
func TestSDKRequestsHaveALength(t *testing.T) {
	rec := &recordLengths{lengths: map[string][]int64{}}
	b := setup(t, telegramtest.Options{NoRateLimits: true}, func(c *Config) { c.HTTPClient = &http.Client{Transport: rec} })
	if _, err := b.a.Send(context.Background(), core.OutMessage{Conversation: conversation("telegram", owner.ID), Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	sends := rec.lengths["sendMessage"]
	if len(sends) != 1 || sends[0] <= 0 {
		t.Fatalf("sendMessage request lengths %v; want one, known", sends)
	}
}
