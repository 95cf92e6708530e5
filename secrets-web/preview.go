package secretsweb

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/silas-gateway/silas/core/previewlink"
)

// Preview pages: an approval card shows at most the first part of a long
// preview (what the action will change); its "Full preview" link opens
// the whole of it here, at /preview/{id}?t=<token> (core/previewlink makes
// and checks the token, and shows a preview only while the stored request
// still verifies). Read-only: the page decides nothing; the card's
// buttons do.

// PreviewSource answers the preview pages (core/previewlink's Pages).
type PreviewSource interface {
	Preview(ctx context.Context, id, token string) (previewlink.Doc, error)
}

type previewData struct {
	Intent string
	Text   string
}

// PreviewURL is the link to request id's preview page with token.
func (s *Server) PreviewURL(id, token string) string {
	return s.base.String() + "/preview/" + url.PathEscape(id) + "?t=" + url.QueryEscape(token)
}

// GET /preview/{id}?t=: the whole preview.
func (s *Server) preview(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	doc, err := s.deps.Previews.Preview(r.Context(), id, r.URL.Query().Get("t"))
	switch {
	case errors.Is(err, previewlink.ErrNotFound):
		s.notFound(w)
	case errors.Is(err, previewlink.ErrAltered):
		s.log.Warn("secure form: preview of an altered request refused", slog.String("approval", id))
		s.message(w, http.StatusConflict, "Altered request",
			"This request was altered after it was proposed: its preview is not shown, and a tap on its card is refused. Nothing was run.")
	case err != nil:
		s.log.Error("secure form: preview", slog.String("approval", id), slog.Any("err", err))
		s.message(w, http.StatusInternalServerError, "Not available", "The preview cannot be shown now; try again.")
	default:
		s.render(w, http.StatusOK, pageData{Title: "What this approval will change", Preview: &previewData{Intent: doc.Intent, Text: doc.Preview}})
	}
}
