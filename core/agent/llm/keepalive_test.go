package llm_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/silas-gateway/silas/core/agent/llm"
)

// TestClientKeepsConnections: with more calls in flight than
// http.DefaultTransport keeps idle per host (2), the client's connections
// to the endpoint are still reused afterwards. The default transport
// closed all but two after each call, so every later call beyond two
// opened a new connection (BENCHMARKS.md "Issue 26 — turns").
func TestClientKeepsConnections(t *testing.T) {
	t.Parallel()
	const n = 8
	var conns atomic.Int64
	arrived := make(chan struct{}, n)
	var mu sync.Mutex
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		rel := release
		mu.Unlock()
		arrived <- struct{}{}
		<-rel // every call is in flight at once: n connections
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"small","object":"model","created":0,"owned_by":"t"}]}`)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", APIKey: testKey, Models: llm.Models{Proxy: "small", Planner: "small", Executor: "small"}})
	if err != nil {
		t.Fatal(err)
	}
	round := func() int64 {
		before := conns.Load()
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				if _, err := c.ListModels(context.Background()); err != nil {
					t.Error(err)
				}
			})
		}
		for range n {
			<-arrived
		}
		mu.Lock()
		close(release)
		release = make(chan struct{})
		mu.Unlock()
		wg.Wait()
		return conns.Load() - before
	}
	if got := round(); got != n {
		t.Fatalf("first round opened %d connections, want %d (one per call in flight)", got, n)
	}
	// A connection goes back to the idle pool just after its body is read,
	// so one may still be on its way back: some slack, well below the
	// n-2 that closing all but two forces.
	if got := round(); got > 2 {
		t.Errorf("second round opened %d new connections; the first round's %d were not kept", got, n)
	}
}
