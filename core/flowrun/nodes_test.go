package flowrun

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/riverqueue/river"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/flow"
	"github.com/silas-gateway/silas/core/flowjob"
	"github.com/silas-gateway/silas/core/store"
)

// output is node id's output in run.
func (b *bundle) output(t *testing.T, run, id string) map[string]any {
	t.Helper()
	_, fr := b.run(t, run)
	ns := fr.Nodes[id]
	if ns == nil {
		t.Fatalf("node %s has no state", id)
	}
	var out map[string]any
	if err := json.Unmarshal(ns.Output, &out); err != nil {
		t.Fatalf("node %s output %s: %v", id, ns.Output, err)
	}
	return out
}

// nodeErr is node id's error code and message in run.
func (b *bundle) nodeErr(t *testing.T, run, id string) (string, string) {
	t.Helper()
	_, fr := b.run(t, run)
	if ns := fr.Nodes[id]; ns != nil && ns.Error != nil {
		return ns.Error.Code, ns.Error.Message
	}
	return "", ""
}

func mustParse(t *testing.T, src string) *flow.Flow {
	t.Helper()
	f, err := flow.Parse("t.yaml", []byte(src), flow.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// What an action.http node proposes: curl with the network on, only to an
// allowed host, no redirects followed, the status verified; anything else
// is not proposed at all.
func TestHTTPActionProposal(t *testing.T) {
	t.Parallel()
	allow := []string{"example.org"}
	cases := []struct {
		name, cfg string
		allow     []string
		wantArgv  []string // a subsequence of the argv, in order
		wantErr   string
		status    string
	}{
		{name: "get", cfg: `{url: "https://api.example.org/health?x=${{ inputs.n }}"}`, allow: allow,
			wantArgv: []string{"curl", "--max-redirs", "0", "--request", "GET", "--", "https://api.example.org/health?x=3"}, status: "[23][0-9][0-9]"},
		{name: "post with headers and body", cfg: `{url: "https://example.org/deploy", method: POST, headers: {X-B: two, A: one}, body: '{"n": ${{ inputs.n }}}', expect_status: 201}`, allow: allow,
			wantArgv: []string{"--request", "POST", "--header", "A: one", "--header", "X-B: two", "--data-raw", `{"n": 3}`, "--", "https://example.org/deploy"}, status: "201"},
		{name: "head", cfg: `{url: "http://example.org/", method: HEAD}`, allow: allow, wantArgv: []string{"--head", "--", "http://example.org/"}, status: "[23][0-9][0-9]"},
		{name: "host not allowed", cfg: `{url: "https://example.org.evil.net/"}`, allow: allow, wantErr: "not in flows.http_allow_domains"},
		{name: "no allowlist", cfg: `{url: "https://example.org/"}`, wantErr: "flows.http_allow_domains is empty"},
		{name: "credentials in the url", cfg: `{url: "https://u:p@example.org/"}`, allow: allow, wantErr: "carries credentials"},
		{name: "rendered url not http", cfg: `{url: "https://${{ inputs.s }}"}`, allow: allow, wantErr: "not an http(s) URL"},
		{name: "header injection", cfg: `{url: "https://example.org/", headers: {A: "x\r\nB: y"}}`, allow: allow, wantErr: "not a single header line"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := mustParse(t, "name: h\nversion: \"1\"\ninputs:\n  n: {type: int, default: 3}\n  s: {type: string, default: \"/x y\"}\nnodes:\n  - id: call\n    type: action.http\n    config: "+c.cfg+"\n")
			m := flow.NewMachine(f)
			fr, _, err := m.Start(nil, 4)
			if err != nil {
				t.Fatal(err)
			}
			pa, err := httpAction(f.Node("call"), m.Scope(fr), c.allow)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			a := pa.Action
			if !a.Network || a.Tool != "shell" {
				t.Fatalf("action = %+v", a)
			}
			i := 0
			for _, s := range a.Argv {
				if i < len(c.wantArgv) && s == c.wantArgv[i] {
					i++
				}
			}
			if i != len(c.wantArgv) {
				t.Fatalf("argv %q lacks %q in order", a.Argv, c.wantArgv)
			}
			if len(a.Verify) != 2 || a.Verify[1].Expect.Regex == nil || !strings.Contains(*a.Verify[1].Expect.Regex, c.status) {
				t.Fatalf("verify = %+v", a.Verify)
			}
		})
	}
}

const httpFlow = `name: web
version: "1"
nodes:
  - id: call
    type: action.http
    config: {url: "https://api.example.org/v1/ping"}
  - id: bad
    type: action.http
    config: {url: "https://elsewhere.net/"}
    policy: {continue_on_error: true}
  - id: after
    type: system.log
    config: {message: "status ${{ nodes.call.status }} body ${{ nodes.call.body }}"}
edges:
  - {from: call, to: after}
`

// An action.http node is an ordinary proposal (an approval waits for its
// tap), its settled record becomes {status, body}; a host outside the
// allowlist fails the node without proposing anything.
func TestHTTPNodeRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{"web.yaml": httpFlow}, func(c *Config) { c.HTTPAllowDomains = []string{"example.org"} })
	run := b.start(t, "web")
	open := b.open(t)
	if len(open) != 1 || len(b.actions.proposed) != 1 || !b.actions.proposed[0].Action.Network {
		t.Fatalf("open = %v, proposed = %+v", open, b.actions.proposed)
	}
	if code, msg := b.nodeErr(t, run, "bad"); code != CodeConfig || !strings.Contains(msg, "elsewhere.net") {
		t.Fatalf("bad = %s %s", code, msg)
	}
	for _, id := range open {
		b.settle(t, id, true, "pong\n200")
	}
	out := b.output(t, run, "call")
	if out["status"] != float64(200) || out["body"] != "pong" || out["verified"] != true {
		t.Fatalf("call output = %v", out)
	}
	if _, ok := out["stdout"]; ok {
		t.Fatalf("stdout kept: %v", out)
	}
	if got := b.statuses(t, run); got != "call=succeeded bad=failed after=succeeded" {
		t.Fatalf("statuses = %s", got)
	}
	if n := b.count(t, `SELECT count(*) FROM audit_log WHERE kind = 'flow.log' AND data->>'message' = 'status 200 body pong'`); n != 1 {
		t.Fatalf("log entries = %d", n)
	}
}

const validateFlow = `name: check
version: "1"
inputs:
  doc: {type: map}
nodes:
  - id: v
    type: data.validate
    config:
      value: inputs.doc
      schema:
        type: object
        required: [host, port]
        properties:
          host: {type: string}
          port: {type: integer, minimum: 1, maximum: 65535}
  - id: ok
    type: system.log
    config: {message: "valid ${{ inputs.doc.host }}"}
  - id: bad
    type: system.log
    config: {message: "invalid: ${{ nodes.v.errors[0] }}"}
edges:
  - {from: v, to: ok, when: nodes.v.valid}
  - {from: v, to: bad, when: "!nodes.v.valid"}
`

// data.validate judges a value against its JSON Schema; the verdict is
// its output, and the flow routes on it.
func TestValidateNode(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{"check.yaml": validateFlow})
	for _, c := range []struct {
		doc, want string
		valid     bool
	}{
		{doc: `doc={"host":"web1","port":443}`, valid: true, want: "v=succeeded ok=succeeded bad=skipped"},
		{doc: `doc={"host":"web1","port":70000}`, want: "v=succeeded ok=skipped bad=succeeded"},
		{doc: `doc={"port":"80"}`, want: "v=succeeded ok=skipped bad=succeeded"},
	} {
		run := b.start(t, "check", c.doc)
		if got := b.statuses(t, run); got != c.want {
			t.Fatalf("%s: %s, want %s", c.doc, got, c.want)
		}
		out := b.output(t, run, "v")
		errs, _ := out["errors"].([]any)
		if out["valid"] != c.valid || (len(errs) == 0) != c.valid {
			t.Fatalf("%s: output %v", c.doc, out)
		}
	}
}

const untilFlow = `name: deploy-wait
version: "1"
nodes:
  - id: approved
    type: control.wait
    config: {until: change-approved}
    policy: {timeout: 24h}
  - id: go
    type: system.log
    config: {message: "approved by ${{ nodes.approved.by }}: ${{ nodes.approved.data }}"}
edges:
  - {from: approved, to: go}
`

// A wait until an event is a row and its timeout's timer, nothing else;
// /flow signal with another event changes nothing, the named one ends
// the wait with the signal as its output.
func TestWaitUntilAnEvent(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{"w.yaml": untilFlow})
	run := b.start(t, "deploy-wait")
	if timers := b.timers(t); len(timers) != 1 || timers[0].timer.Kind != "timeout" {
		t.Fatalf("timers = %+v (only the wait's timeout)", timers)
	}
	signal := func(arg string) *shown {
		return b.inTurn(t, func(ctx context.Context, tx *store.Tx, o core.TaskOut) error {
			return b.rt.Signal(ctx, tx, core.StoredTurn{Seq: 3, Turn: origin()}, core.TrustOwner, arg, o)
		})
	}
	if got := signal(ShortID(run) + " something-else"); len(got.replies) != 1 || !strings.Contains(got.replies[0], "is not waiting for %q") {
		t.Fatalf("wrong event: %+v", got.replies)
	}
	if got := b.statuses(t, run); got != "approved=running go=pending" {
		t.Fatalf("after a wrong event: %s", got)
	}
	signal(ShortID(run) + " change-approved CHG-42 looks fine")
	if got := b.statuses(t, run); got != "approved=succeeded go=succeeded" {
		t.Fatalf("after the event: %s", got)
	}
	if out := b.output(t, run, "approved"); out["event"] != "change-approved" || out["data"] != "CHG-42 looks fine" || out["by"] != string(owner) {
		t.Fatalf("output = %v", out)
	}
	if got := signal(ShortID(run) + " change-approved"); len(got.replies) != 1 || !strings.Contains(got.replies[0], "not waiting for an event") {
		t.Fatalf("late signal: %+v", got.replies)
	}
}

// `silas flow signal` stores the signal as a step job; the job delivers it.
func TestSignalAsAJob(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{"w.yaml": untilFlow})
	run := b.start(t, "deploy-wait")
	if err := QueueSignal(b.ctx, b.st, run, flowjob.Signal{Event: "change-approved", Data: "ok", By: "operator"}); err != nil {
		t.Fatal(err)
	}
	if err := QueueSignal(b.ctx, b.st, "nope", flowjob.Signal{Event: "x"}); err == nil {
		t.Fatal("a signal to no run was accepted")
	}
	var raw []byte
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT args FROM river_job WHERE kind = 'silas_flow_step' AND args ? 'signal'`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var a flowjob.Args
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatal(err)
	}
	if err := b.rt.DeliverSignal(b.ctx, a.Run, *a.Signal); err != nil {
		t.Fatal(err)
	}
	if got := b.statuses(t, run); got != "approved=succeeded go=succeeded" {
		t.Fatalf("after the job: %s", got)
	}
	// Delivered twice (River's at-least-once): nothing changes.
	if err := b.rt.DeliverSignal(b.ctx, a.Run, *a.Signal); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM flow_attempts WHERE run_id = $1 AND node = 'go'`, run); n != 1 {
		t.Fatalf("go attempts = %d", n)
	}
}

// Message injection by reply: a reply to a gate's card answers it (its
// text, or the choice it names); a reply to the progress card reaches the
// waiting gate; a stranger, a stale card and a message that replies to
// nothing of ours are not the run's.
func TestReplyToACard(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{"say.yaml": sayFlow})
	run := b.start(t, "say")
	row, _ := b.run(t, run)
	delivered := func(key, ref string) {
		t.Helper()
		if _, err := b.st.Pool().Exec(b.ctx, `INSERT INTO sent_messages (channel, message_key, conversation, ref) VALUES ('web', $1, $2, $3)`, key, conv, ref); err != nil {
			t.Fatal(err)
		}
	}
	var why string
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT card FROM flow_attempts WHERE node = 'why'`).Scan(&why); err != nil {
		t.Fatal(err)
	}
	delivered(why, "m-why")
	delivered(row.ProgressCard, "m-progress")
	delivered("ask-unrelated", "m-other")
	// in, when set, is the conversation the reply is in, with the card's
	// (conv) as its ReplyIn: a Slack reply in the card's thread.
	var in core.ConversationID
	reply := func(ref, text string, who core.IdentityID, trust core.Trust) (bool, *shown) {
		t.Helper()
		turn := origin()
		turn.Text, turn.ReplyTo, turn.Sender = text, core.MessageRef(ref), who
		if in != "" {
			turn.Conversation, turn.ReplyIn = in, conv
		}
		st := core.StoredTurn{Seq: 5, Turn: turn}
		ok, err := b.rt.Addressed(b.ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return false, nil
		}
		return true, b.inTurn(t, func(ctx context.Context, tx *store.Tx, o core.TaskOut) error {
			return b.rt.AnswerReply(ctx, tx, st, trust, o)
		})
	}
	if ok, _ := reply("m-other", "hello", owner, core.TrustOwner); ok {
		t.Fatal("a reply to another card was taken by the flow")
	}
	if ok, _ := reply("m-nothing", "hello", owner, core.TrustOwner); ok {
		t.Fatal("a reply to an unknown message was taken by the flow")
	}
	if ok, got := reply("m-why", "not yours", "web:stranger", core.TrustAuth); !ok || len(got.replies) != 1 || !strings.Contains(got.replies[0], "Only %s or an owner") {
		t.Fatalf("stranger: %v %+v", ok, got)
	}
	if _, got := reply("m-why", "the disk is full", owner, core.TrustOwner); len(got.updates) == 0 {
		t.Fatalf("the gate's card was not updated: %+v", got)
	}
	if got := b.statuses(t, run); got != "why=succeeded pick=running log=pending" {
		t.Fatalf("after the reply: %s", got)
	}
	if _, got := reply("m-why", "again", owner, core.TrustOwner); len(got.replies) != 1 || !strings.Contains(got.replies[0], "not waiting for an answer") {
		t.Fatalf("stale card: %+v", got.replies)
	}
	// The progress card: the waiting gate (choices only) takes a choice's name.
	if _, got := reply("m-progress", "maybe", owner, core.TrustOwner); len(got.replies) != 1 || !strings.Contains(got.replies[0], "takes only its buttons") {
		t.Fatalf("not a choice: %+v", got.replies)
	}
	// The same reply from another conversation (a thread) that does not
	// say the card's is not the run's; saying it (ReplyIn), it is.
	turn := origin()
	turn.Conversation, turn.Text, turn.ReplyTo = conv+":thread", "B", "m-progress"
	if ok, err := b.rt.Addressed(b.ctx, core.StoredTurn{Seq: 6, Turn: turn}); err != nil || ok {
		t.Fatalf("a reply in another conversation was taken by the flow: %v %v", ok, err)
	}
	in = conv + ":thread"
	reply("m-progress", " B ", owner, core.TrustOwner)
	if got := b.statuses(t, run); got != "why=succeeded pick=succeeded log=succeeded" {
		t.Fatalf("after the reply to the progress card: %s", got)
	}
	if out := b.output(t, run, "pick"); out["response"].(map[string]any)["choice"] != "b" {
		t.Fatalf("pick = %v", out)
	}
	if n := b.count(t, `SELECT count(*) FROM audit_log WHERE kind = 'flow.log' AND data->>'message' = 'because the disk is full'`); n != 1 {
		t.Fatalf("the reply did not reach the run (%d)", n)
	}
}

// drain plays River for step jobs that are not timers: works each (as the
// worker does) until none is left; after calls back after each.
func (b *bundle) drain(t *testing.T, after ...func()) {
	t.Helper()
	w := &stepWorker{r: b.rt}
	for range 200 {
		var raw []byte
		err := b.st.Pool().QueryRow(b.ctx, `DELETE FROM river_job WHERE id = (SELECT id FROM river_job WHERE kind = 'silas_flow_step'
			AND NOT args ? 'timer' ORDER BY id LIMIT 1) RETURNING args`).Scan(&raw)
		if err != nil {
			return // none left
		}
		var a flowjob.Args
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatal(err)
		}
		if err := w.Work(b.ctx, &river.Job[flowjob.Args]{Args: a}); err != nil {
			t.Fatal(err)
		}
		for _, f := range after {
			f()
		}
	}
	t.Fatal("step jobs keep coming")
}

const childFlow = `name: child
version: "1"
inputs:
  item: {type: string, default: x}
nodes:
  - id: say
    type: data.template
    config: {template: "hello ${{ inputs.item }}"}
  - id: check
    type: control.if
    config: {condition: "inputs.item != 'bad'"}
  - id: boom
    type: control.fail
    config: {message: "bad item"}
edges:
  - {from: say, to: check}
  - {from: check, to: boom, when: "!nodes.check.condition"}
`

const parentFlow = `name: parent
version: "1"
inputs:
  list: {type: list, default: ["a", "b", "c"]}
nodes:
  - id: sub
    type: control.subflow
    config: {flow: child, inputs: {item: "'sub'"}}
  - id: each
    type: control.foreach
    config: {items: inputs.list, flow: child, max_parallel: 2}
  - id: log
    type: system.log
    config: {message: "${{ nodes.sub.outputs.say.text }} / ${{ nodes.each.count }} / ${{ nodes.each.items[2].say.text }}"}
edges:
  - {from: sub, to: each}
  - {from: each, to: log}
`

// A subflow is a child run whose outputs become the node's; a foreach
// runs one child per item, at most max_parallel at once, and collects
// their outputs in order. Children post no progress card or summary.
func TestSubflowAndForeach(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{"child.yaml": childFlow, "parent.yaml": parentFlow})
	run := b.start(t, "parent")
	if n := b.count(t, `SELECT count(*) FROM flow_runs WHERE parent_run = $1`, run); n != 1 {
		t.Fatalf("children after start = %d, want the subflow's", n)
	}
	// Never more than max_parallel (2) of the foreach's children at once.
	most := 0
	b.drain(t, func() {
		most = max(most, b.count(t, `SELECT count(*) FROM flow_runs WHERE parent_step = 'each/0/1' AND status = 'running'`))
	})
	if most != 2 {
		t.Fatalf("at most %d foreach children ran at once, want 2", most)
	}
	if got := b.statuses(t, run); got != "sub=succeeded each=succeeded log=succeeded" {
		t.Fatalf("statuses = %s", got)
	}
	if n := b.count(t, `SELECT count(*) FROM flow_runs WHERE parent_run = $1 AND parent_step = 'each/0/1' AND status = 'succeeded'`, run); n != 3 {
		t.Fatalf("foreach children = %d", n)
	}
	if n := b.count(t, `SELECT count(*) FROM audit_log WHERE kind = 'flow.log' AND data->>'message' = 'hello sub / 3 / hello c'`); n != 1 {
		t.Fatalf("the outputs did not come back: %v", b.output(t, run, "each"))
	}
	// One progress card and one summary: the parent's.
	if n := b.count(t, `SELECT count(*) FROM outbox WHERE message_key LIKE 'flow-%' AND op = 'send'`); n != 1 {
		t.Fatalf("progress cards sent = %d, want 1", n)
	}
	if n := b.count(t, `SELECT count(*) FROM flow_runs WHERE status = 'running'`); n != 0 {
		t.Fatalf("%d runs still running", n)
	}
}

// A failing item fails the foreach node (code child) and cancels the
// items still running.
func TestForeachItemFails(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{"child.yaml": childFlow, "parent.yaml": parentFlow})
	run := b.start(t, "parent", `list=["bad","b","c"]`)
	b.drain(t)
	if got := b.statuses(t, run); got != "sub=succeeded each=failed log=cancelled" && got != "sub=succeeded each=failed log=skipped" {
		t.Fatalf("statuses = %s", got)
	}
	if code, msg := b.nodeErr(t, run, "each"); code != CodeChild || !strings.Contains(msg, "item 0") {
		t.Fatalf("each = %s %s", code, msg)
	}
	if row, _ := b.run(t, run); row.Status != "failed" {
		t.Fatalf("run = %s", row.Status)
	}
	if n := b.count(t, `SELECT count(*) FROM flow_runs WHERE status = 'running'`); n != 0 {
		t.Fatalf("%d runs still running", n)
	}
}

// A run's picture shows its nodes in their stored states, for its own
// conversation only.
func TestGraphSVG(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{"say.yaml": sayFlow})
	run := b.start(t, "say")
	svg, err := b.rt.GraphSVG(b.ctx, conv, run)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`data-node="why" data-state="running"`, `data-node="pick" data-state="pending"`, "<svg "} {
		if !strings.Contains(string(svg), want) {
			t.Fatalf("picture lacks %q:\n%s", want, svg)
		}
	}
	if _, err := b.rt.GraphSVG(b.ctx, "web:other", run); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("another conversation's run: %v", err)
	}
	if _, err := b.rt.GraphSVG(b.ctx, conv, "nope"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("unknown run: %v", err)
	}
}
