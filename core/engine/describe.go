package engine

import (
	"fmt"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

// humanKinds are the audit kinds /audit shows; the rest (intake, trust,
// outbound messages) is detail for `silas audit tail`.
var humanKinds = []string{
	"approval.requested", "approval.approved", "approval.declined", "approval.expired", "approval.refused",
	"policy.refused", "execution.refused", "execution.finished", "execution.interrupted",
	"verification.passed", "verification.failed", "pairing.bound",
}

// describe renders one audit row as a line a person reads:
// "12:04 you approved `uname -a`".
func describe(r audit.Row, me core.IdentityID) string {
	who := r.Entry.Actor
	if who == string(me) {
		who = "you"
	}
	d := r.Entry.Data
	s := func(k string) string { v, _ := d[k].(string); return v }
	var text string
	switch r.Entry.Kind {
	case "approval.requested":
		text = fmt.Sprintf("%s asked to run `%s` (%s risk)", who, s("command"), s("risk"))
	case "approval.approved":
		by := s("by")
		if by == string(me) {
			by = "you"
		}
		text = fmt.Sprintf("%s approved card %s", by, s("approval"))
	case "approval.declined":
		text = fmt.Sprintf("%s declined card %s", who, s("approval"))
	case "approval.expired":
		text = fmt.Sprintf("card %s expired", s("approval"))
	case "approval.refused":
		text = fmt.Sprintf("a tap by %s was refused (%s)", who, s("reason"))
	case "policy.refused":
		text = fmt.Sprintf("an action from %s was refused (%s)", who, s("reason"))
	case "execution.refused":
		text = fmt.Sprintf("card %s was refused at execution: %s", s("approval"), s("reason"))
	case "execution.finished":
		text = fmt.Sprintf("card %s ran in %v ms, exit %v", s("approval"), d["duration_ms"], d["exit_code"])
	case "execution.interrupted":
		text = fmt.Sprintf("card %s was interrupted by a restart", s("approval"))
	case "verification.passed":
		text = fmt.Sprintf("card %s verified: %s", s("approval"), s("summary"))
	case "verification.failed":
		text = fmt.Sprintf("card %s failed verification: %s", s("approval"), s("summary"))
	case "pairing.bound":
		text = fmt.Sprintf("%s was paired with %s trust", s("identity"), s("role"))
	default:
		text = r.Entry.Kind
	}
	return r.At.Local().Format("15:04") + " " + text
}
