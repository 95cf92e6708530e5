package channeltest

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/commands/catalog"
)

// scenario is one conformance check.
type scenario struct {
	name   string
	shared bool
	run    func(w *world)
}

var scenarios = []scenario{
	{name: "reply", run: reply},
	{name: "tap_edits_card", run: tapEditsCard},
	{name: "replayed_tap", run: replayedTap},
	{name: "non_approver_tap", shared: true, run: nonApproverTap},
	{name: "expiry", run: expiry},
	{name: "text_fallback", run: textFallback},
	{name: "burst_across_restart", run: burstAcrossRestart},
	{name: "rate_limit_storm", run: rateLimitStorm},
	{name: "secure_input_link", run: secureInputLink},
	{name: "oversized_reply", run: oversizedReply},
	{name: "restart_mid_execution", run: restartMidExecution},
	{name: "commands", run: commandsEverywhere},
	{name: "approver_elsewhere", shared: true, run: approverElsewhere},
	{name: "no_approver_reachable", shared: true, run: noApproverReachable},
	{name: "deaf_channel", run: deafChannel},
}

// Scenarios lists the names of the suite's scenarios (for a Factory that
// skips some).
func Scenarios() []string {
	out := make([]string, len(scenarios))
	for i, s := range scenarios {
		out[i] = s.name
	}
	return out
}

// Run runs every scenario as a parallel subtest of t, each on its own
// platform (from f), database and gateway.
func Run(t *testing.T, f Factory) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			p, skip := f(t, Options{Scenario: sc.name, Shared: sc.shared})
			if skip != "" {
				t.Skip(skip)
			}
			sc.run(newWorld(t, p))
		})
	}
}

// reply: a message gets its answer.
func reply(w *world) {
	w.start(5 * time.Second)
	w.p.Say(w.t, Approver, "/whoami")
	want := fmt.Sprintf("You are %s with owner trust.", w.p.Identity(Approver))
	w.waitMessage("the answer to /whoami", func(m Message) bool { return m.Card == "" && m.Text == want })
}

// tapEditsCard: /run → card → tap (→ confirm) → the same message shows the
// verified result, its buttons gone.
func tapEditsCard(w *world) {
	w.start(5 * time.Second)
	w.p.Say(w.t, Approver, "/run echo conformance")
	c := w.waitCard("echo conformance")
	if !slices.Contains(c.Choices(), "approve") || !slices.Contains(c.Choices(), "decline") {
		w.t.Fatalf("card buttons %v; want approve and decline", c.Buttons)
	}
	w.p.Tap(w.t, Approver, c, "approve")
	done := w.waitSame(c.ID, "the card edited to the verified result", func(m Message) bool {
		return closed(m, cards.StatusDone) && strings.Contains(m.Text, "exit code 0")
	})
	if done.Card != c.Card || !strings.Contains(done.Text, "conformance") {
		w.t.Errorf("done card = %+v", done)
	}

	// Medium risk: a confirm step on the same message.
	w.p.Say(w.t, Approver, "/run touch conformance.txt")
	c2 := w.waitCard("touch conformance.txt")
	w.p.Tap(w.t, Approver, c2, "approve")
	conf := w.waitSame(c2.ID, "the confirm button on the same message", func(m Message) bool {
		return m.Status == cards.StatusConfirming && slices.Contains(m.Choices(), "confirm")
	})
	w.p.Tap(w.t, Approver, conf, "confirm")
	w.waitSame(c2.ID, "the confirmed card edited to the verified result", func(m Message) bool {
		return closed(m, cards.StatusDone) && strings.Contains(m.Text, "exit code 0")
	})
	// Each card is one message: no copy was sent alongside.
	for _, card := range []cards.ID{c.Card, c2.Card} {
		n := 0
		for _, m := range w.p.Chat(w.t) {
			if m.Card == card {
				n++
			}
		}
		if n != 1 {
			w.t.Errorf("card %s is shown in %d messages; want 1", card, n)
		}
	}
	previewAltered(w)
}

// previewAltered: the preview a card showed is covered by the request's
// signature; changed in the database after the card was sent, a tap on the
// card runs nothing and is refused as altered (issue 28 point 5). It runs
// in tapEditsCard's gateway (make test's time).
func previewAltered(w *world) {
	w.p.Say(w.t, Approver, "/run echo preview-conformance")
	c := w.waitCard("echo preview-conformance")
	if _, err := w.db.Pool().Exec(w.ctx, `UPDATE approvals SET preview = 'Program: echo (harmless)' WHERE id = $1`, string(c.Card)); err != nil {
		w.t.Fatal(err)
	}
	w.p.Tap(w.t, Approver, c, "approve")
	w.eventually("the tap on the altered card refused", 30*time.Second, func() (bool, string) {
		n := w.count(`SELECT count(*) FROM audit_log WHERE kind = 'approval.refused' AND data->>'reason' = 'altered' AND data->>'approval' = $1`, string(c.Card))
		return n == 1, fmt.Sprintf("%d refusals", n)
	})
	if n := w.count(`SELECT count(*) FROM executions WHERE approval_id = $1`, string(c.Card)); n != 0 {
		w.t.Fatalf("the altered request ran %d time(s)", n)
	}
}

// replayedTap: the same tap twice (a double tap, a stale client) runs the
// action once.
func replayedTap(w *world) {
	w.start(5 * time.Second)
	w.p.Say(w.t, Approver, "/run echo once")
	c := w.waitCard("echo once")
	w.p.Tap(w.t, Approver, c, "approve")
	w.p.Tap(w.t, Approver, c, "approve")
	w.waitSame(c.ID, "the verified result", func(m Message) bool { return closed(m, cards.StatusDone) })
	// And once more, on the stale view, after it ran.
	w.p.Tap(w.t, Approver, c, "approve")
	w.waitTold(Approver, "Already decided")
	if n := w.count(`SELECT count(*) FROM audit_log WHERE kind = 'execution.started'`); n != 1 {
		w.t.Errorf("%d executions started; want 1", n)
	}
	if n := w.count(`SELECT count(*) FROM token_nonces`); n != 1 {
		w.t.Errorf("%d tokens consumed; want 1", n)
	}
	if m := w.waitSame(c.ID, "the card", func(Message) bool { return true }); !closed(m, cards.StatusDone) {
		w.t.Errorf("card after the replays = %+v", m)
	}
}

// nonApproverTap: someone who may not decide is told so, and the card is
// left as it was (still open for the approver).
func nonApproverTap(w *world) {
	w.start(5 * time.Second)
	w.p.Say(w.t, Approver, "/run echo mine")
	c := w.waitCard("echo mine")
	w.p.Tap(w.t, Other, c, "approve")
	w.waitTold(Other, "may not decide")
	// The refusal is processed: the card must still be open, unchanged.
	now := w.waitSame(c.ID, "the card", func(Message) bool { return true })
	if now.Status != cards.StatusPending || now.Text != c.Text || !slices.Equal(now.Buttons, c.Buttons) {
		w.t.Errorf("the refused tap changed the card:\nbefore %+v\nafter  %+v", c, now)
	}
	if n := w.count(`SELECT count(*) FROM approvals WHERE status <> 'pending'`); n != 0 {
		w.t.Errorf("%d approvals left pending after a refused tap", n)
	}
	w.p.Tap(w.t, Approver, c, "approve")
	w.waitSame(c.ID, "the approver's tap to work", func(m Message) bool { return closed(m, cards.StatusDone) })
}

// expiry: a card left alone past its time is edited to expired, buttons
// gone, without anyone tapping it.
func expiry(w *world) {
	w.start(5 * time.Second)
	w.p.Say(w.t, Approver, "/run echo later")
	c := w.waitCard("echo later")
	w.clock.Advance(6 * time.Minute) // the approval TTL is 5 minutes
	w.waitSame(c.ID, "the card edited to expired", func(m Message) bool { return closed(m, cards.StatusExpired) })
	if n := w.count(`SELECT count(*) FROM executions`); n != 0 {
		w.t.Errorf("%d executions of an expired card", n)
	}
}

// textFallback: "approve <id>" typed (and "1" quoting the card where the
// platform quotes) does what the button does; a typed tap the core refuses
// gets a visible answer.
func textFallback(w *world) {
	w.start(5 * time.Second)
	w.p.Say(w.t, Approver, "/run echo typed")
	c := w.waitCard("echo typed")
	w.p.Say(w.t, Approver, "approve "+string(c.Card))
	w.waitSame(c.ID, "the typed approval to run the command", func(m Message) bool {
		return closed(m, cards.StatusDone) && strings.Contains(m.Text, "exit code 0")
	})

	w.p.Say(w.t, Approver, "/run echo quoted")
	c2 := w.waitCard("echo quoted")
	runs := 1
	if w.p.Reply(w.t, Approver, c2, "1") {
		w.waitSame(c2.ID, "\"1\" quoting the card to run the command", func(m Message) bool { return closed(m, cards.StatusDone) })
		runs++
	} else {
		w.p.Say(w.t, Approver, "decline "+string(c2.Card))
		w.waitSame(c2.ID, "the typed decline", func(m Message) bool { return closed(m, cards.StatusDeclined) })
	}

	// A well-formed id of no card: refused, and the sender sees it.
	w.p.Say(w.t, Approver, "approve "+core.NewID())
	w.waitTold(Approver, "Unknown card")
	if n := w.count(`SELECT count(*) FROM audit_log WHERE kind = 'execution.started'`); n != runs {
		w.t.Errorf("%d executions; want %d", n, runs)
	}
}

// burstAcrossRestart: messages keep coming while the gateway is stopped
// abruptly and started again; every one is stored once and answered.
// Replies are delivered at least once: one sent just before the stop whose
// delivery was not recorded yet is sent again (platforms have no
// idempotency key for sends), so doubles are bounded, not forbidden.
func burstAcrossRestart(w *world) {
	const total = 16
	n := w.start(time.Millisecond)
	want := map[string]int{}
	for i := range total {
		want[fmt.Sprintf("Unknown command /b%02d. Try /help.", i)] = 1
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range total {
			w.p.Say(w.t, Approver, fmt.Sprintf("/b%02d", i))
			time.Sleep(30 * time.Millisecond)
		}
	}()
	w.eventually("a third of the burst stored", 30*time.Second, func() (bool, string) {
		c := w.count(`SELECT count(*) FROM turns`)
		return c >= total/3, fmt.Sprintf("%d turns", c)
	})
	n.kill()
	time.Sleep(100 * time.Millisecond) // messages arrive meanwhile
	w.start(time.Millisecond)
	wg.Wait()
	w.eventually("every message answered", 60*time.Second, func() (bool, string) {
		got := 0
		for _, m := range w.p.Chat(w.t) {
			if want[m.Text] > 0 {
				got++
			}
		}
		return got >= total && w.count(`SELECT count(*) FROM turns WHERE status = 'done'`) == total,
			fmt.Sprintf("%d of %d answers", got, total)
	})
	if got := w.count(`SELECT count(*) FROM turns`); got != total {
		w.t.Errorf("turns = %d; want %d (each event once)", got, total)
	}
	if got := w.count(`SELECT count(DISTINCT event_id) FROM turns`); got != total {
		w.t.Errorf("distinct events = %d; want %d", got, total)
	}
	w.eventually("the outbox drained", 30*time.Second, func() (bool, string) {
		p := w.count(`SELECT count(*) FROM outbox WHERE status = 'pending'`)
		return p == 0, fmt.Sprintf("%d pending", p)
	})
	if got := w.count(`SELECT count(*) FROM outbox`); got != total {
		w.t.Errorf("replies enqueued = %d; want one per message (%d)", got, total)
	}
	got := map[string]int{}
	for _, m := range w.p.Chat(w.t) {
		got[m.Text]++
	}
	doubles := 0
	for text, k := range want {
		if got[text] < k {
			w.t.Errorf("answer %q missing", text)
		}
		doubles += max(got[text]-k, 0)
	}
	// One send per chat can be in flight when the gateway stops.
	if doubles > 1 {
		w.t.Errorf("%d answers delivered twice; at most one (in flight at the stop) may be", doubles)
	}
	for _, v := range w.p.Violations() {
		w.t.Errorf("platform limit broken: %s", v)
	}
}

// rateLimitStorm: the platform answers 429 for a while; everything still
// arrives, once, in order, and within the platform's limits.
func rateLimitStorm(w *world) {
	w.start(5 * time.Second)
	if !w.p.RateLimit(w.t, 4) {
		w.t.Skip("this platform has no rate limit answered with 429")
	}
	var want []string
	for i := range 6 {
		cmd := fmt.Sprintf("/s%02d", i)
		want = append(want, "Unknown command "+cmd+". Try /help.")
		w.p.Say(w.t, Approver, cmd)
	}
	var got []string
	w.eventually("every reply through the storm", 60*time.Second, func() (bool, string) {
		got = got[:0]
		for _, m := range w.p.Chat(w.t) {
			got = append(got, m.Text)
		}
		return len(got) >= len(want), fmt.Sprintf("%q", got)
	})
	if !slices.Equal(got, want) {
		w.t.Errorf("replies, in order:\n%q\nwant\n%q", got, want)
	}
	if n := w.count(`SELECT count(*) FROM outbox WHERE attempts > 0`); n == 0 {
		w.t.Error("no delivery was retried: the storm did not happen")
	}
	for _, v := range w.p.Violations() {
		w.t.Errorf("platform limit broken: %s", v)
	}
}

// secureInputLink: /secret NAME shows a card with the secure form's link
// (and never a value).
func secureInputLink(w *world) {
	w.start(5 * time.Second)
	w.p.Say(w.t, Approver, "/secret API_TOKEN")
	m := w.waitMessage("the secure-input card", func(m Message) bool { return m.Link() != "" })
	if !strings.HasPrefix(m.Link(), secretBase) || !strings.Contains(m.Text, "API_TOKEN") {
		w.t.Errorf("secure-input card = %+v", m)
	}
	if len(m.Choices()) != 0 {
		w.t.Errorf("secure-input card has choices: %v", m.Buttons)
	}
}

// oversizedReply: a card with a long output and a reply longer than the
// platform allows are shortened or split to fit, and the split loses
// nothing.
func oversizedReply(w *world) {
	w.start(5 * time.Second)
	limit := w.p.MaxTextLen()
	fits := func(m Message) {
		limit := limit
		if m.MaxLen > 0 {
			limit = m.MaxLen
		}
		if limit > 0 && utf8.RuneCountInString(m.Text) > limit {
			w.t.Errorf("message %s is %d characters; the platform allows %d", m.ID, utf8.RuneCountInString(m.Text), limit)
		}
	}
	// ~8,900 characters of output: inline on the card, which must fit.
	w.p.Say(w.t, Approver, "/run seq 1 2000")
	c := w.waitCard("seq 1 2000")
	w.p.Tap(w.t, Approver, c, "approve")
	done := w.waitSame(c.ID, "the long output's card", func(m Message) bool { return closed(m, cards.StatusDone) })
	fits(done)

	// ~11,400 characters: stored; /output answers with its first 10,000
	// characters in one reply, which the platform may have to split.
	w.p.Say(w.t, Approver, "/run seq 1 2500")
	c2 := w.waitCard("seq 1 2500")
	w.p.Tap(w.t, Approver, c2, "approve")
	w.waitSame(c2.ID, "the stored output's card", func(m Message) bool { return closed(m, cards.StatusDone) })
	before := len(w.p.Chat(w.t))
	w.p.Say(w.t, Approver, "/output "+string(c2.Card))
	var parts []Message
	w.eventually("the whole /output reply", 60*time.Second, func() (bool, string) {
		msgs := w.p.Chat(w.t)
		parts = msgs[min(before, len(msgs)):]
		var b strings.Builder
		for _, m := range parts {
			b.WriteString(m.Text)
			b.WriteString("\n")
		}
		return strings.Contains(b.String(), "\n2000\n"), fmt.Sprintf("%d messages", len(parts))
	})
	var b strings.Builder
	for _, m := range parts {
		fits(m)
		b.WriteString("\n")
		b.WriteString(m.Text)
	}
	joined := b.String() + "\n"
	w.t.Logf("the /output reply (%d characters) came as %d message(s)", len(joined), len(parts))
	if !strings.Contains(joined, "Output out-") {
		w.t.Errorf("the reply does not name the output: %.200q", joined)
	}
	for i := 1; i <= 2000; i++ {
		if !strings.Contains(joined, fmt.Sprintf("\n%d\n", i)) {
			w.t.Fatalf("line %d of the output is missing from the reply (%d messages)", i, len(parts))
		}
	}
}

// restartMidExecution: the gateway stops abruptly while an approved
// command runs; after the restart the platform's copy of the card reaches
// a final state (interrupted — or verified, had it finished) with its
// buttons removed, and the command is not run again.
func restartMidExecution(w *world) {
	n := w.start(time.Millisecond)
	w.p.Say(w.t, Approver, "/run sleep 30")
	c := w.waitCard("sleep 30")
	w.p.Tap(w.t, Approver, c, "approve")
	w.eventually("the command running", 30*time.Second, func() (bool, string) {
		k := w.count(`SELECT count(*) FROM executions WHERE status = 'running'`)
		return k == 1, fmt.Sprintf("%d running", k)
	})
	n.kill()
	// The person comes back only after the gateway has delivered the
	// card's final state: it must be there for them, not only for whoever
	// happened to be connected at that moment.
	n = w.startAway(5 * time.Second)
	w.eventually("the execution closed and its update delivered", 30*time.Second, func() (bool, string) {
		open := w.count(`SELECT count(*) FROM executions WHERE status IN ('queued', 'running', 'executed')`)
		pending := w.count(`SELECT count(*) FROM outbox WHERE status = 'pending'`)
		return open == 0 && pending == 0, fmt.Sprintf("%d executions open, %d outbox jobs pending", open, pending)
	})
	w.p.Started(w.t, n.ch)
	m := w.waitSame(c.ID, "the card in a final state after the restart", func(m Message) bool {
		return closed(m, cards.StatusInterrupted, cards.StatusDone, cards.StatusFailed)
	})
	// The documented outcome (docs/architecture.md): a run the restart
	// killed is interrupted, never reported as finished and never re-run.
	if m.Status != cards.StatusInterrupted {
		w.t.Fatalf("card after the restart is %q, want %q; its text:\n%s", m.Status, cards.StatusInterrupted, m.Text)
	}
	if k := w.count(`SELECT count(*) FROM audit_log WHERE kind = 'execution.started'`); k != 1 {
		w.t.Errorf("%d executions started; want 1 (never re-run)", k)
	}
}

// commandInvocations give every command of the catalog's menu an argument
// whose answer is known and names the command's own handler (none needs a
// task, a stored secret or a pairing code to exist).
var commandInvocations = map[string]struct{ arg, answer string }{
	"help":     {"", "Commands:"},
	"whoami":   {"", "You are "},
	"status":   {"", "Channels:"},
	"pending":  {"", "No open approvals here."},
	"consents": {"", "No standing approvals here."},
	"tasks":    {"", "No tasks here yet."},
	"stop":     {"", "No running task here to stop."},
	"flows":    {"", "Flows are not enabled on this gateway."},
	"flow":     {"status", "Flows are not enabled on this gateway."},
	"audit":    {"0", "Usage: /audit"},
	"output":   {"out-none", "No stored output out-none in this chat."},
	"secret":   {"delete NO_SUCH_SECRET", "There is no secret named"},
	"secrets":  {"", "No secrets stored."},
	"pair":     {"000000", "That pairing code is unknown, used or expired."},
	"run":      {"echo commands-everywhere", ""}, // a card
}

// commandsEverywhere: every command of the one catalog is offered and
// answered on every channel — the platform's own way where it has one
// (Discord's slash commands, Slack's /silas), typed elsewhere — none is
// "Unknown command", and "stop" typed without the slash reaches /stop
// instead of the agent.
func commandsEverywhere(w *world) {
	w.start(5 * time.Second)
	nc, native := w.p.(NativeCommands)
	menu := catalog.Menu()
	if native {
		w.eventually("the platform's registered commands", 30*time.Second, func() (bool, string) {
			reg := nc.Registered(w.t)
			if reg == nil {
				return true, ""
			}
			for _, c := range menu {
				if !slices.Contains(reg, c.Name) {
					return false, fmt.Sprintf("registered %v: no %s", reg, c.Name)
				}
			}
			return true, ""
		})
	}
	seen := map[string]int{}
	expect := func(answer string) {
		seen[answer]++
		want := seen[answer]
		w.eventually(fmt.Sprintf("answer %d × %q", want, answer), 30*time.Second, func() (bool, string) {
			n, msgs := 0, w.p.Chat(w.t)
			for _, m := range msgs {
				if strings.Contains(m.Text, answer) {
					n++
				}
			}
			told := 0
			for _, s := range w.p.Told(w.t, Approver) {
				if strings.Contains(s, answer) {
					told++
				}
			}
			return max(n, told) >= want, dump(msgs)
		})
	}
	// /run last: its open card would change what /pending answers.
	slices.SortStableFunc(menu, func(a, b catalog.Command) int {
		return cmp.Compare(boolInt(a.Name == "run"), boolInt(b.Name == "run"))
	})
	for _, c := range menu {
		inv, ok := commandInvocations[c.Name]
		if !ok {
			w.t.Fatalf("the catalog's /%s has no invocation in this scenario: add one", c.Name)
		}
		if native {
			nc.Command(w.t, Approver, c.Name, inv.arg)
		} else {
			w.p.Say(w.t, Approver, strings.TrimSpace("/"+c.Name+" "+inv.arg))
		}
		if inv.answer == "" {
			w.waitCard(inv.arg)
			continue
		}
		expect(inv.answer)
	}
	// Typed without the slash, as people write in a DM.
	w.p.Say(w.t, Approver, "stop")
	expect(commandInvocations["stop"].answer)
	w.p.Say(w.t, Approver, "Tasks")
	expect(commandInvocations["tasks"].answer)
	for _, m := range w.p.Chat(w.t) {
		if strings.Contains(m.Text, "Unknown command") {
			w.t.Errorf("a command was unknown: %q", m.Text)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
