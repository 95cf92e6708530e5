package secretsweb

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/core/previewlink"
)

// previews answers one request's preview for one token, and refuses
// another request as altered.
type previews struct{}

func (previews) Preview(_ context.Context, id, token string) (previewlink.Doc, error) {
	switch {
	case id == "req-1" && token == "good":
		return previewlink.Doc{Intent: "write the config", Preview: "--- /srv/app.conf\n+<script>alert(1)</script>\n+port=8080"}, nil
	case id == "req-2" && token == "good":
		return previewlink.Doc{}, previewlink.ErrAltered
	}
	return previewlink.Doc{}, previewlink.ErrNotFound
}

// The preview page shows a long approval preview whole, escaped, under the
// form's strict headers; a wrong link is 404 and an altered request's
// preview is not shown.
func TestPreviewPage(t *testing.T) {
	t.Parallel()
	b := setup(t, false, func(_ *Config, d *Deps) { d.Previews = previews{} })
	c := b.browser()
	if u := b.srv.PreviewURL("req-1", "good"); u != b.base+"/preview/req-1?t=good" {
		t.Fatalf("PreviewURL = %q", u)
	}
	r := b.get(t, c, b.srv.PreviewURL("req-1", "good"))
	if r.status != http.StatusOK || !strings.Contains(r.body, "write the config") || !strings.Contains(r.body, "port=8080") ||
		!strings.Contains(r.body, "&lt;script&gt;") || strings.Contains(r.body, "<script>") {
		t.Fatalf("page = %d %q", r.status, r.body)
	}
	if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("headers = %v", r.header)
	}
	for _, u := range []string{b.srv.PreviewURL("req-1", "bad"), b.base + "/preview/req-1", b.srv.PreviewURL("req-9", "good")} {
		if r := b.get(t, c, u); r.status != http.StatusNotFound || strings.Contains(r.body, "port=8080") {
			t.Fatalf("%s = %d %q", u, r.status, r.body)
		}
	}
	if r := b.get(t, c, b.srv.PreviewURL("req-2", "good")); r.status != http.StatusConflict || !strings.Contains(r.body, "altered") {
		t.Fatalf("altered = %d %q", r.status, r.body)
	}
}

// Without a preview source (secrets commands' own form) there is no page.
func TestNoPreviewPages(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	if r := b.get(t, b.browser(), b.srv.PreviewURL("req-1", "good")); r.status != http.StatusNotFound {
		t.Fatalf("page = %d", r.status)
	}
}
