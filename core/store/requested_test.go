package store

import (
	"errors"
	"testing"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

func TestRequestedCommand(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	req := func(id, cmd string) audit.Entry {
		return audit.Entry{Kind: audit.KindApprovalRequested, Actor: "webchat:local", Conversation: "webchat:local",
			Data: map[string]any{"approval": id, "command": cmd, "risk": "low"}}
	}
	mustDo(t, ctx, s, entriesOp(req("a1", "echo first"), req("a2", "echo other")))
	// A later entry for the same approval (anyone who can append can write
	// one) does not replace what was recorded at the request.
	mustDo(t, ctx, s, entriesOp(req("a1", "echo appended later")))
	for _, c := range []struct {
		id, want string
		err      error
	}{
		{"a1", "echo first", nil},
		{"a2", "echo other", nil},
		{"a3", "", core.ErrNotFound},
	} {
		got, err := s.RequestedCommand(ctx, core.ApprovalID(c.id))
		if got != c.want || !errors.Is(err, c.err) {
			t.Errorf("RequestedCommand(%s) = %q, %v; want %q, %v", c.id, got, err, c.want, c.err)
		}
	}
}
