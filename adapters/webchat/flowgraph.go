package webchat

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/internal/lazyre"
)

// A flow run's picture (docs/flows.md, issue 23): GET /flows/<run>.svg
// answers, for a signed-in session, the run's graph with each node's state
// as SVG drawn by the flow runtime; the page shows it under the run's
// progress card (a card whose id is "flow-<run>") and loads it again at
// every edit of the card, so it follows the run. A run of another
// conversation is not found.

// FlowGraphs draws a flow run's picture (core/flowrun's Runtime).
type FlowGraphs interface {
	GraphSVG(ctx context.Context, conv core.ConversationID, run string) ([]byte, error)
}

type flowGraphs struct{ FlowGraphs }

// SetFlowGraphs sets what draws the pictures (serve builds the flow
// runtime after the adapters); until then /flows/ is not found.
func (a *Adapter) SetFlowGraphs(g FlowGraphs) {
	if g == nil {
		a.graphs.Store(nil)
		return
	}
	a.graphs.Store(&flowGraphs{g})
}

var runIDRe = lazyre.New(`^[A-Za-z0-9_-]{1,64}$`)

// graphCSP: the picture is an image, nothing in it runs or loads.
const graphCSP = "default-src 'none'; style-src 'unsafe-inline'"

func (a *Adapter) serveFlowGraph(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, "GET, HEAD")
		return
	}
	if _, _, ok := a.authorize(w, r); !ok {
		return
	}
	run, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, "/flows/"), ".svg")
	g := a.graphs.Load()
	if !ok || g == nil || !runIDRe.MatchString(run) {
		httpError(w, http.StatusNotFound, "no such run")
		return
	}
	svg, err := g.GraphSVG(r.Context(), a.conv, run)
	if errors.Is(err, core.ErrNotFound) {
		httpError(w, http.StatusNotFound, "no such run")
		return
	}
	if err != nil {
		a.log.Error("draw a flow run", slog.String("run", run), slog.Any("err", err))
		httpError(w, http.StatusInternalServerError, "could not draw the run")
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", graphCSP)
	h.Set("Content-Type", "image/svg+xml")
	h.Set("Cache-Control", "no-store")
	w.Write(svg) //nolint:errcheck // client went away
}
