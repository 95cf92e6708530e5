package cards

import "strings"

// Mark is the colour mark adapters put before a risk level (🟢 low …
// 🔴 irreversible); "" for an unknown level.
func (r Risk) Mark() string { return riskMarks[r] }

// Line is the one-line heading adapters show for a card in this status
// ("✅ Done", "⌛ Expired", …); ok is false for a status shown without one
// (pending: the buttons say it).
func (s Status) Line() (line string, ok bool) {
	line, ok = statusLines[s]
	return line, ok
}

var riskMarks = map[Risk]string{
	RiskLow: "🟢", RiskMedium: "🟡", RiskHigh: "🟠", RiskIrreversible: "🔴",
}

var statusLines = map[Status]string{
	StatusConfirming:  "⏳ Waiting for confirmation",
	StatusApproved:    "✅ Approved",
	StatusRunning:     "⚙️ Running",
	StatusDone:        "✅ Done",
	StatusFailed:      "❌ Failed",
	StatusDeclined:    "🚫 Declined",
	StatusExpired:     "⌛ Expired",
	StatusRefused:     "⛔ Refused",
	StatusInterrupted: "⚠️ Interrupted",
}

// StatusIn finds which status's Line a rendered card's text shows (for
// tests and tools reading a platform's copy of a card back).
func StatusIn(text string) (Status, bool) {
	for s, line := range statusLines {
		if strings.Contains(text, line) {
			return s, true
		}
	}
	return "", false
}
