package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/tracing"
)

// TestTraceFollowsACard: /run → card → a tap → sandbox → verification →
// the done card delivered, recorded with the SDK's in-memory exporter. The
// proposal's trace holds the wait for the tap, the execution, its sandbox
// run, the verification and the delivery of the result; the tap's
// decision, in a trace of its own, links to it; each carries the
// approval's id, and the execution links to the tap. Nothing in any span
// names the command.
//
// Not parallel: tracing is process-wide, and the package's parallel tests
// wait until this one is done.
func TestTraceFollowsACard(t *testing.T) {
	exp := recordSpans(t)
	b := setup(t)
	const canary = "cAnArY-7Qm2"
	cmd := "echo " + canary
	b.send(t, owner, "/run "+cmd)
	c := b.pendingCard(t, cmd)
	b.tap(t, owner, c.ID, "approve")
	b.waitStatus(t, c.ID, cards.StatusDone)

	id := string(c.ID)
	// The done card's delivery span ends just after the fake channel saw it.
	var spans tracetest.SpanStubs
	deadline := time.Now().Add(10 * time.Second)
	for {
		spans = exp.GetSpans()
		if deliveredDone(spans, id) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}

	byName := map[string][]tracetest.SpanStub{}
	for _, s := range spans {
		if hasAttr(s, string(tracing.AttrApprovalID), id) {
			byName[s.Name] = append(byName[s.Name], s)
		}
	}
	for _, n := range []string{tracing.SpanIntake, tracing.SpanPolicy, tracing.SpanApprovalWait, tracing.SpanDecide,
		tracing.SpanExecute, tracing.SpanSandbox, tracing.SpanVerify, tracing.SpanDeliver} {
		if len(byName[n]) == 0 {
			t.Errorf("no %s span with %s=%s; spans:\n%s", n, tracing.AttrApprovalID, id, names(spans))
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	proposal := byName[tracing.SpanPolicy][0].SpanContext.TraceID()
	inTrace := func(name string) bool {
		for _, s := range spans {
			if s.Name == name && s.SpanContext.TraceID() == proposal {
				return true
			}
		}
		return false
	}
	// The proposal's trace: intake → turn → policy, then minutes later the
	// wait, the execution with its sandbox run and verification, and the
	// delivery of the result.
	for _, n := range []string{tracing.SpanIntake, tracing.SpanTurn, tracing.SpanApprovalWait, tracing.SpanExecute,
		tracing.SpanSandbox, tracing.SpanVerify, tracing.SpanDeliver} {
		if !inTrace(n) {
			t.Errorf("the proposal's trace %s has no %s span; spans:\n%s", proposal, n, names(spans))
		}
	}
	// The tap's decision is in the tap's trace, linked to the proposal's.
	d := byName[tracing.SpanDecide][0]
	if d.SpanContext.TraceID() == proposal {
		t.Errorf("the decision is in the proposal's trace; want the tap's own, linked")
	}
	if !linksTo(d, proposal) {
		t.Errorf("the decision does not link to the proposal's trace %s: %+v", proposal, d.Links)
	}
	// The execution, in the proposal's trace, links to the tap that
	// queued it.
	x := byName[tracing.SpanExecute][0]
	if !linksToSpan(x, d.SpanContext) {
		t.Errorf("the execution does not link to the tap's decision %s: %+v", d.SpanContext.SpanID(), x.Links)
	}
	if !deliveredDone(spans, id) {
		t.Errorf("no delivery of the done card in the proposal's trace")
	}
	// Never the command (argv) or the message text.
	for _, s := range spans {
		if strings.Contains(fmt.Sprint(s.Name, s.Attributes, s.Events, s.Status, s.Links), canary) {
			t.Errorf("span %s carries the command: %v", s.Name, s.Attributes)
		}
	}
}

func hasAttr(s tracetest.SpanStub, key, value string) bool {
	for _, a := range s.Attributes {
		if string(a.Key) == key && a.Value.String() == value {
			return true
		}
	}
	return false
}

func linksTo(s tracetest.SpanStub, id trace.TraceID) bool {
	for _, l := range s.Links {
		if l.SpanContext.TraceID() == id {
			return true
		}
	}
	return false
}

func linksToSpan(s tracetest.SpanStub, sc trace.SpanContext) bool {
	for _, l := range s.Links {
		if l.SpanContext.TraceID() == sc.TraceID() && l.SpanContext.SpanID() == sc.SpanID() {
			return true
		}
	}
	return false
}

// deliveredDone: a delivery of card id in the trace of its execution.
func deliveredDone(spans tracetest.SpanStubs, id string) bool {
	var exec trace.TraceID
	for _, s := range spans {
		if s.Name == tracing.SpanExecute && hasAttr(s, string(tracing.AttrApprovalID), id) {
			exec = s.SpanContext.TraceID()
		}
	}
	if !exec.IsValid() {
		return false
	}
	for _, s := range spans {
		if s.Name == tracing.SpanDeliver && s.SpanContext.TraceID() == exec && hasAttr(s, string(tracing.AttrApprovalID), id) &&
			hasAttr(s, string(tracing.AttrOp), "update") {
			return true
		}
	}
	return false
}

func names(spans tracetest.SpanStubs) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s trace=%s %v\n", s.Name, s.SpanContext.TraceID(), s.Attributes)
	}
	return b.String()
}

// TestTraceResumedExecutionLinksToTheTap: an execution another instance
// or a restarted one runs (here: the in-memory link to the tap read and
// dropped as it is claimed) still links to the tap's decision, through
// the traceparent the decision stored on the approval row.
func TestTraceResumedExecutionLinksToTheTap(t *testing.T) {
	exp := recordSpans(t)
	ch := newFakeChannel()
	b := setupAccess(t, ch, ch, "", func(c *gateway.Config) {
		// What a takeover or a restart leaves: no tap remembered here.
		c.Hooks.ExecutionStarted = func(id core.ApprovalID) { tracing.TapOf(string(id)) }
	})
	b.send(t, owner, "/run echo resumed")
	c := b.pendingCard(t, "echo resumed")
	b.tap(t, owner, c.ID, "approve")
	b.waitStatus(t, c.ID, cards.StatusDone)

	id := string(c.ID)
	var d, x *tracetest.SpanStub
	deadline := time.Now().Add(10 * time.Second)
	for d == nil || x == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no decision or execution span with %s=%s; spans:\n%s", tracing.AttrApprovalID, id, names(exp.GetSpans()))
		}
		time.Sleep(20 * time.Millisecond)
		for _, s := range exp.GetSpans() {
			if !hasAttr(s, string(tracing.AttrApprovalID), id) {
				continue
			}
			switch s.Name {
			case tracing.SpanDecide:
				d = &s
			case tracing.SpanExecute:
				x = &s
			}
		}
	}
	if !linksToSpan(*x, d.SpanContext) {
		t.Errorf("the resumed execution does not link to the tap's decision %s: %+v", d.SpanContext.SpanID(), x.Links)
	}
}

// recordSpans turns tracing on for the test, each span recorded as it ends.
func recordSpans(t *testing.T) *tracetest.InMemoryExporter {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tracing.Enable(tp)
	t.Cleanup(func() {
		tracing.Enable(nil)
		_ = tp.Shutdown(context.Background())
	})
	return exp
}
