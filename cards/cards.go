// Package cards is the platform-neutral card model: the one shape every
// decision takes (intent, risk, rationale, choices whose labels state the
// consequence), its validation and its plain-text fallback. Adapters render
// a Card natively; the core never sees platform widgets.
//
// cards depends on the standard library only.
package cards

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ID identifies a card. A tap carries only the ID and a choice ID back,
// never data the core trusts.
type ID string

// Risk is the risk level of the action a card asks about.
type Risk string

const (
	RiskLow          Risk = "low"
	RiskMedium       Risk = "medium"
	RiskHigh         Risk = "high"
	RiskIrreversible Risk = "irreversible"
)

// Valid reports whether r is one of the four levels.
func (r Risk) Valid() bool {
	switch r {
	case RiskLow, RiskMedium, RiskHigh, RiskIrreversible:
		return true
	}
	return false
}

// NeedsConfirm reports whether a decision at this level takes a second,
// confirming tap on the same card (medium and above).
func (r Risk) NeedsConfirm() bool { return r == RiskMedium || r == RiskHigh || r == RiskIrreversible }

// Rank orders risks from low (0) to irreversible (3); unknown is -1.
func (r Risk) Rank() int {
	switch r {
	case RiskLow:
		return 0
	case RiskMedium:
		return 1
	case RiskHigh:
		return 2
	case RiskIrreversible:
		return 3
	}
	return -1
}

// Kind says what a card is for.
type Kind string

const (
	// KindApproval asks an approver to allow or decline one action.
	KindApproval Kind = "approval"
	// KindInfo reports something and may offer choices with no approval
	// semantics (for example "Allow this sender?").
	KindInfo Kind = "info"
	// KindSecureInput carries a link to the secure form instead of choices.
	KindSecureInput Kind = "secure_input"
)

// Style hints how a choice is shown; adapters map it to native styles.
type Style string

const (
	StylePrimary   Style = "primary"
	StyleSecondary Style = "secondary"
	StyleDanger    Style = "danger"
)

// ChoiceKind says what a choice does to the decision, so a client tells
// the forward choice from the decline without guessing from style or label.
type ChoiceKind string

const (
	// ChoiceForward moves the decision on (approve, confirm, allow).
	ChoiceForward ChoiceKind = "forward"
	// ChoiceDecline ends it with nothing run (decline, deny).
	ChoiceDecline ChoiceKind = "decline"
)

// Choice is one button. ID is what comes back on a tap ("approve",
// "confirm", "decline"); Label states the consequence ("Run `uname -a`").
type Choice struct {
	ID    string     `json:"id"`
	Label string     `json:"label"`
	Style Style      `json:"style,omitempty"`
	Kind  ChoiceKind `json:"kind,omitempty"`
}

// Link is a URL button (secure-input cards).
type Link struct {
	Label string `json:"label"`
	URL   string `json:"url"`
}

// Status is where the decision a card asks for stands. Adapters show it and
// remove the buttons once it is no longer pending.
type Status string

const (
	StatusPending    Status = "pending"
	StatusConfirming Status = "confirming"
	StatusApproved   Status = "approved"
	StatusRunning    Status = "running"
	StatusDone       Status = "done"
	StatusFailed     Status = "failed"
	StatusDeclined   Status = "declined"
	StatusExpired    Status = "expired"
	StatusRefused    Status = "refused"
	// StatusInterrupted: the gateway stopped while the action ran; it may
	// or may not have completed and was not run again.
	StatusInterrupted Status = "interrupted"
)

// Open reports whether the card still accepts taps.
func (s Status) Open() bool { return s == StatusPending || s == StatusConfirming }

// Card is one decision or report, rendered natively by each adapter.
type Card struct {
	ID        ID     `json:"id"`
	Kind      Kind   `json:"kind"`
	Intent    string `json:"intent"`
	Risk      Risk   `json:"risk,omitempty"`
	Rationale string `json:"rationale,omitempty"`
	// Command is the exact action shown to the approver, verbatim.
	Command       string   `json:"command,omitempty"`
	AffectedItems []string `json:"affected_items,omitempty"`
	// Details is expandable content: collapsed for low/medium risk, shown
	// for high/irreversible (see DetailsExpanded).
	Details string   `json:"details,omitempty"`
	Choices []Choice `json:"choices,omitempty"`
	Link    *Link    `json:"link,omitempty"`
	Status  Status   `json:"status"`
	// Outcome is a one-line result once decided ("exit code 0 ✓").
	Outcome string `json:"outcome,omitempty"`
	// Output is the first part of an execution's output, shown inline.
	Output string `json:"output,omitempty"`
	// OutputRef names stored output too long to paste.
	OutputRef string `json:"output_ref,omitempty"`
	// ExpiresAt is RFC 3339, for display only; the core enforces expiry.
	ExpiresAt string `json:"expires_at,omitempty"`
}

// Limits that keep a card on one phone screen.
const (
	MaxIntent    = 200
	MaxRationale = 400
	MaxChoices   = 5
	MaxLabel     = 64
	MaxChoiceID  = 16
)

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid card")

// Validate checks the card is well formed: required fields present, sizes
// bounded, choice ids unique and short, labels non-empty.
func (c *Card) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
	}
	if c.ID == "" {
		return bad("id is required")
	}
	switch c.Kind {
	case KindApproval, KindInfo, KindSecureInput:
	default:
		return bad("unknown kind %q", c.Kind)
	}
	if strings.TrimSpace(c.Intent) == "" {
		return bad("intent is required")
	}
	if utf8.RuneCountInString(c.Intent) > MaxIntent {
		return bad("intent longer than %d characters", MaxIntent)
	}
	if utf8.RuneCountInString(c.Rationale) > MaxRationale {
		return bad("rationale longer than %d characters", MaxRationale)
	}
	if c.Kind == KindApproval {
		if !c.Risk.Valid() {
			return bad("approval card needs a risk level, got %q", c.Risk)
		}
		if strings.TrimSpace(c.Rationale) == "" {
			return bad("approval card needs a rationale")
		}
	}
	if c.Kind == KindSecureInput {
		if c.Link == nil || c.Link.URL == "" {
			return bad("secure-input card needs a link")
		}
		if len(c.Choices) > 0 {
			return bad("secure-input card has no choices")
		}
	}
	if len(c.Choices) > MaxChoices {
		return bad("more than %d choices", MaxChoices)
	}
	seen := map[string]bool{}
	for i, ch := range c.Choices {
		if ch.ID == "" || len(ch.ID) > MaxChoiceID || strings.ContainsAny(ch.ID, ": \n") {
			return bad("choice %d: id %q must be 1-%d characters without ':' or spaces", i, ch.ID, MaxChoiceID)
		}
		if seen[ch.ID] {
			return bad("choice %d: duplicate id %q", i, ch.ID)
		}
		seen[ch.ID] = true
		if strings.TrimSpace(ch.Label) == "" {
			return bad("choice %q: label is required", ch.ID)
		}
		if utf8.RuneCountInString(ch.Label) > MaxLabel {
			return bad("choice %q: label longer than %d characters", ch.ID, MaxLabel)
		}
		switch ch.Kind {
		case "", ChoiceForward, ChoiceDecline:
		default:
			return bad("choice %q: unknown kind %q", ch.ID, ch.Kind)
		}
	}
	return nil
}

// DetailsExpanded reports whether details are shown by default: only when
// the risk is high or irreversible, so the approver cannot miss them.
func (c *Card) DetailsExpanded() bool { return c.Risk.Rank() >= RiskHigh.Rank() }

// Open reports whether the card still takes taps.
func (c *Card) Open() bool { return c.Status.Open() && len(c.Choices) > 0 }

// PlainText renders the card for platforms without buttons: numbered choices
// and the text replies ("approve <id>") that are validated exactly like taps.
func (c *Card) PlainText() string {
	var b strings.Builder
	b.WriteString(c.Intent)
	b.WriteString("\n")
	if c.Risk != "" {
		fmt.Fprintf(&b, "Risk: %s\n", c.Risk)
	}
	if c.Rationale != "" {
		b.WriteString(c.Rationale)
		b.WriteString("\n")
	}
	if c.Command != "" {
		fmt.Fprintf(&b, "Command: %s\n", c.Command)
	}
	for _, it := range c.AffectedItems {
		fmt.Fprintf(&b, "• %s\n", it)
	}
	if c.Details != "" && c.DetailsExpanded() {
		b.WriteString(c.Details)
		b.WriteString("\n")
	}
	if c.Outcome != "" {
		fmt.Fprintf(&b, "Result: %s\n", c.Outcome)
	}
	if c.Output != "" {
		b.WriteString(c.Output)
		b.WriteString("\n")
	}
	if c.OutputRef != "" {
		fmt.Fprintf(&b, "Full output stored as %s\n", c.OutputRef)
	}
	if c.Link != nil {
		fmt.Fprintf(&b, "%s: %s\n", c.Link.Label, c.Link.URL)
	}
	if c.Open() {
		for i, ch := range c.Choices {
			fmt.Fprintf(&b, "%d. %s — reply \"%s %s\"\n", i+1, ch.Label, ch.ID, c.ID)
		}
	} else if c.Status != "" && c.Kind == KindApproval {
		fmt.Fprintf(&b, "Status: %s\n", c.Status)
	}
	return strings.TrimRight(b.String(), "\n")
}
