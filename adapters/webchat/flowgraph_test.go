package webchat

import (
	"context"
	"net/http"
	"testing"

	"github.com/silas-gateway/silas/core"
)

type fakeGraphs map[string]string

func (f fakeGraphs) GraphSVG(_ context.Context, conv core.ConversationID, run string) ([]byte, error) {
	svg, ok := f[string(conv)+"/"+run]
	if !ok {
		return nil, core.ErrNotFound
	}
	return []byte(svg), nil
}

// A run's picture: only for a session, only a run of this conversation,
// as an image nothing in which runs.
func TestFlowGraph(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	token := f.login(t)
	const svg = `<svg xmlns="http://www.w3.org/2000/svg"></svg>`
	if resp := f.do(t, "GET", "/flows/r1.svg", cookieHdr(token), ""); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("before SetFlowGraphs: %d", resp.StatusCode)
	}
	f.a.SetFlowGraphs(fakeGraphs{string(f.a.Conversation()) + "/r1": svg, "webchat:other/r2": svg})
	for _, tc := range []struct {
		name, path string
		hdr        http.Header
		want       int
	}{
		{"no cookie", "/flows/r1.svg", nil, http.StatusUnauthorized},
		{"ok", "/flows/r1.svg", cookieHdr(token), http.StatusOK},
		{"another conversation's run", "/flows/r2.svg", cookieHdr(token), http.StatusNotFound},
		{"unknown", "/flows/r3.svg", cookieHdr(token), http.StatusNotFound},
		{"not .svg", "/flows/r1", cookieHdr(token), http.StatusNotFound},
		{"escaped slash", "/flows/..%2Fsession.svg", cookieHdr(token), http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := f.do(t, "GET", tc.path, tc.hdr, "")
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.want)
			}
			if tc.want != http.StatusOK {
				return
			}
			if ct, csp := resp.Header.Get("Content-Type"), resp.Header.Get("Content-Security-Policy"); ct != "image/svg+xml" || csp != graphCSP {
				t.Fatalf("content type %q, CSP %q", ct, csp)
			}
			if body := readBody(t, resp); body != svg {
				t.Fatalf("body %q", body)
			}
		})
	}
}
