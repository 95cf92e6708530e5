package render

import (
	"fmt"
	"strings"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

// HumanKinds are the audit kinds /audit shows; the rest (intake, trust,
// outbound messages) is detail for `silas audit tail`.
var HumanKinds = []audit.Kind{
	audit.KindApprovalRequested, audit.KindApprovalApproved, audit.KindApprovalDeclined, audit.KindApprovalExpired, audit.KindApprovalRefused,
	audit.KindPolicyRefused, audit.KindExecutionRefused, audit.KindExecutionFinished, audit.KindExecutionInterrupted,
	audit.KindVerificationPassed, audit.KindVerificationFailed, audit.KindPairingBound,
	audit.KindTaskCreated, audit.KindTaskPlanned, audit.KindTaskVerified, audit.KindTaskEscalated, audit.KindTaskDecided,
	audit.KindTaskDone, audit.KindTaskStopped, audit.KindTaskAsked, audit.KindTaskAnswered,
	audit.KindTaskRehydrated,
}

// Describe renders audit rows as lines a person reads. The steps of one
// approval that follow its decision are folded into the decision's line:
// "12:04 you approved `uname -a`; ran 38 ms, exit 0; verified: exit code 0 ✓".
// cmdOf names an approval's command (it may return "").
func Describe(rows []audit.Row, me core.IdentityID, cmdOf func(id string) string) []string {
	var lines []string
	lineOf := map[string]int{} // approval id → index of its decision line
	who := func(id string) string {
		if id == string(me) {
			return "you"
		}
		return id
	}
	for _, r := range rows {
		d := r.Entry.Data
		s := func(k string) string { v, _ := d[k].(string); return v }
		id := s("approval")
		cmd := "card " + id
		if c := cmdOf(id); c != "" {
			cmd = "`" + c + "`"
		}
		var text, tail string
		switch r.Entry.Kind {
		case audit.KindApprovalRequested:
			text = fmt.Sprintf("%s asked to run `%s` (%s risk)", who(r.Entry.Actor), s("command"), s("risk"))
		case audit.KindApprovalApproved:
			text = fmt.Sprintf("%s approved %s", who(s("by")), cmd)
		case audit.KindApprovalDeclined:
			text = fmt.Sprintf("%s declined %s", who(r.Entry.Actor), cmd)
		case audit.KindApprovalExpired:
			text = fmt.Sprintf("%s expired without a decision", cmd)
		case audit.KindApprovalRefused:
			text = fmt.Sprintf("a tap by %s on %s was refused (%s)", who(r.Entry.Actor), cmd, strings.ReplaceAll(s("reason"), "_", " "))
		case audit.KindPolicyRefused:
			text = fmt.Sprintf("an action from %s was refused (%s)", who(r.Entry.Actor), s("reason"))
		case audit.KindExecutionRefused:
			tail = "refused at execution: " + s("reason")
		case audit.KindExecutionFinished:
			tail = fmt.Sprintf("ran %v ms, exit %v", d["duration_ms"], d["exit_code"])
		case audit.KindExecutionInterrupted:
			tail = "interrupted by a restart (not re-run)"
		case audit.KindVerificationPassed:
			tail = "verified: " + s("summary")
		case audit.KindVerificationFailed:
			tail = "NOT verified: " + s("summary")
		case audit.KindPairingBound:
			text = fmt.Sprintf("%s was paired with %s trust", s("identity"), s("role"))
		case audit.KindTaskCreated:
			text = fmt.Sprintf("%s started a task: %s", who(r.Entry.Actor), s("goal"))
		case audit.KindTaskPlanned:
			text = fmt.Sprintf("task planned: %s (%v steps, %v checks)", s("title"), d["steps"], d["checks"])
		case audit.KindTaskVerified:
			if d["passed"] == true {
				text = "task checks passed: " + s("summary")
			} else {
				text = "task checks failed: " + s("summary")
			}
		case audit.KindTaskEscalated:
			text = fmt.Sprintf("a task got stuck and asked for a decision (%s)", s("reason"))
		case audit.KindTaskDecided:
			text = fmt.Sprintf("%s chose %s for a task", who(s("by")), strings.TrimPrefix(s("event"), "user_"))
		case audit.KindTaskDone:
			text = "a task finished, verified by the gateway"
		case audit.KindTaskStopped:
			text = "a task was stopped: " + s("reason")
		case audit.KindTaskAsked:
			text = "a task asked: " + s("question")
		case audit.KindTaskAnswered:
			text = fmt.Sprintf("%s answered a task's question", who(s("by")))
		case audit.KindTaskRehydrated:
			if d["ok"] == true {
				text = fmt.Sprintf("a task read back a long output it had stored (%v characters)", d["chars"])
			} else {
				text = "a task asked for a stored output that is not its own or does not exist"
			}
		default:
			text = string(r.Entry.Kind)
		}
		if tail != "" {
			if i, ok := lineOf[id]; ok {
				lines[i] += "; " + tail
				continue
			}
			text = cmd + " " + tail
		}
		if r.Entry.Kind == audit.KindApprovalApproved {
			lineOf[id] = len(lines)
		}
		lines = append(lines, r.At.Local().Format("15:04")+" "+text)
	}
	return lines
}
