package flowrun

import (
	"bytes"
	"context"
	"fmt"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/flow"
)

// GraphSVG is the picture of run id as it stands (its pinned flow's graph,
// each node in its state), for the conversation conv: a run of another
// conversation is core.ErrNotFound, as is one that does not exist. The
// web chat shows it beside the run's progress card and loads it again at
// every edit of the card.
func (r *Runtime) GraphSVG(ctx context.Context, conv core.ConversationID, id string) ([]byte, error) {
	row, err := r.st.GetFlowRun(ctx, id)
	if err != nil {
		return nil, err
	}
	if row.Conversation != conv {
		return nil, core.ErrNotFound
	}
	w, err := r.decode(row)
	if err != nil {
		return nil, err
	}
	states := map[string]flow.NodeStatus{}
	for nid, ns := range w.fr.Nodes {
		if ns != nil {
			states[nid] = ns.Status
		}
	}
	var b bytes.Buffer
	if err := flow.WriteSVG(&b, w.p.f, states); err != nil {
		return nil, fmt.Errorf("flowrun: run %s: picture: %w", id, err)
	}
	return b.Bytes(), nil
}
