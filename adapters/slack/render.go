package slack

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/silas-gateway/silas/cards"
)

// Rendering: cards become Block Kit messages, texts become mrkdwn. All text
// that is not our own markup goes through escape, so it can never open a
// mention (<!channel>, <@U…>) or a link: Slack gives meaning to & < > only,
// and those become &amp; &lt; &gt;.

// Slack's limits (https://docs.slack.dev/reference/block-kit/blocks).
const (
	// MaxMessageLen is the longest text of one message Slack accepts
	// (chat.postMessage truncates beyond it).
	MaxMessageLen = 40000
	// MaxBlocks is the most blocks of one message.
	MaxBlocks = 50
	// MaxSectionText is the longest text of a section or context element.
	MaxSectionText = 3000
	// MaxHeaderText is the longest header text.
	MaxHeaderText = 150
	// MaxButtonText is the longest button label.
	MaxButtonText = 75
	// MaxButtons is the most elements of one actions block.
	MaxButtons = 25
	// maxFallbackText bounds the notification text of a card.
	maxFallbackText = 300
)

// truncMark ends a field the adapter shortened to fit.
const truncMark = "… (truncated)"

func cardsID(s string) cards.ID { return cards.ID(s) }

// escape escapes Slack's three control characters.
func escape(s string) string {
	if !strings.ContainsAny(s, "<>&") {
		return s
	}
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// escapedWidth is how many characters r takes once escaped.
func escapedWidth(r rune) int {
	switch r {
	case '<', '>':
		return 4
	case '&':
		return 5
	}
	return 1
}

func escLen(s string) int {
	n := 0
	for _, r := range s {
		n += escapedWidth(r)
	}
	return n
}

// code renders s as a code block. A "```" inside would end the block
// early, so a zero-width space separates its backticks.
func code(s string) string {
	s = strings.ReplaceAll(escape(s), "```", "``\u200b`")
	return "```" + s + "```"
}

// clip cuts s (measured escaped, plus extra characters of markup) to fit
// max, adding truncMark when it cut.
func clip(s string, max, extra int) string {
	if escLen(s)+extra <= max {
		return s
	}
	budget := max - extra - utf8.RuneCountInString(truncMark) - 8 // room for ``` splitting
	var b strings.Builder
	used := 0
	for _, r := range s {
		w := escapedWidth(r)
		if used+w > budget {
			break
		}
		b.WriteRune(r)
		used += w
	}
	return strings.TrimRight(b.String(), " \n") + truncMark
}

// clipPlain cuts plain text to max runes.
func clipPlain(s string, max int) string {
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return string(r[:max-1]) + "…"
}

// rendered is one message ready for chat.postMessage / chat.update.
type rendered struct {
	text   string // mrkdwn; the notification text when blocks are set
	blocks []slack.Block
}

func mrkdwn(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.MarkdownType, s, false, false)
}

func section(s string) slack.Block { return slack.NewSectionBlock(mrkdwn(s), nil, nil) }

func contextBlock(s string) slack.Block { return slack.NewContextBlock("", mrkdwn(s)) }

// blank reports text Slack refuses as a block's text.
func blank(s string) bool { return strings.TrimSpace(s) == "" }

// renderCard renders a card as Block Kit: a header with the intent, the
// risk as a context line, the rationale, the exact command in a code block,
// then results and buttons whose labels state the consequence (primary
// style for the recommended choice, danger for destructive ones, a confirm
// dialog on high and irreversible risk). Every field is clipped to Slack's
// limits; a command that cannot be shown in full loses its buttons, as
// nobody is asked to approve what they cannot read.
func renderCard(c *cards.Card) (rendered, error) {
	if err := c.Validate(); err != nil {
		return rendered{}, err
	}
	var bl []slack.Block
	head := c.Intent
	if m := c.Risk.Mark(); m != "" {
		head = m + " " + head
	}
	bl = append(bl, slack.NewHeaderBlock(slack.NewTextBlockObject(slack.PlainTextType, clipPlain(head, MaxHeaderText), false, false)))
	var ctx []string
	if c.Risk != "" {
		ctx = append(ctx, "Risk: *"+escape(string(c.Risk))+"*")
	}
	if s, ok := c.Status.Line(); ok {
		ctx = append(ctx, s)
	}
	if c.Open() && c.ExpiresAt != "" {
		ctx = append(ctx, "Decide before "+escape(c.ExpiresAt))
	}
	if len(ctx) > 0 {
		bl = append(bl, contextBlock(strings.Join(ctx, " · ")))
	}
	if !blank(c.Rationale) {
		bl = append(bl, section(escape(clip(c.Rationale, MaxSectionText, 0))))
	}
	clipped := false
	if !blank(c.Command) {
		cmd := c.Command
		if extra := 6 + strings.Count(cmd, "```"); escLen(cmd)+extra > MaxSectionText {
			cmd, clipped = clip(cmd, MaxSectionText, extra), true
		}
		bl = append(bl, section(code(cmd)))
		if clipped {
			bl = append(bl, contextBlock("_The command is too long to show here in full, so it cannot be approved from Slack._"))
		}
	}
	if len(c.AffectedItems) > 0 {
		var b strings.Builder
		for _, it := range c.AffectedItems {
			line := "• " + escape(clipPlain(it, 200)) + "\n"
			if b.Len()+len(line) > MaxSectionText-len(truncMark) {
				b.WriteString(truncMark)
				break
			}
			b.WriteString(line)
		}
		bl = append(bl, section(strings.TrimRight(b.String(), "\n")))
	}
	if !blank(c.Details) {
		d := escape(clip(c.Details, MaxSectionText, 0))
		if c.DetailsExpanded() {
			bl = append(bl, section(d))
		} else {
			bl = append(bl, contextBlock(d)) // Slack has no collapsible block: small print
		}
	}
	if !blank(c.Outcome) {
		bl = append(bl, section("*Result:* "+escape(clip(c.Outcome, MaxSectionText, 11))))
	}
	if !blank(c.Output) {
		out := c.Output
		extra := 6 + strings.Count(out, "```")
		bl = append(bl, section(code(clip(out, MaxSectionText, extra))))
	}
	if !blank(c.OutputRef) {
		bl = append(bl, contextBlock("Full output stored as `"+escape(clipPlain(c.OutputRef, 200))+"` (/output "+escape(clipPlain(c.OutputRef, 200))+")"))
	}
	var buttons []slack.BlockElement
	if c.Open() && !clipped {
		for i, ch := range c.Choices {
			v, err := buttonValue(string(c.ID), ch.ID)
			if err != nil {
				return rendered{}, err
			}
			b := slack.NewButtonBlockElement(v, v, slack.NewTextBlockObject(slack.PlainTextType, clipPlain(ch.Label, MaxButtonText), false, false))
			switch {
			case ch.Style == cards.StyleDanger:
				b.Style = slack.StyleDanger
			case ch.Style == cards.StylePrimary || (i == 0 && ch.Style == ""):
				b.Style = slack.StylePrimary
			}
			if c.Risk.Rank() >= cards.RiskHigh.Rank() && ch.Style != cards.StyleSecondary && !isDecline(ch.ID) {
				b.Confirm = slack.NewConfirmationBlockObject(
					slack.NewTextBlockObject(slack.PlainTextType, "Are you sure?", false, false),
					mrkdwn(escape(clip("This is "+string(c.Risk)+" risk: "+c.Intent, 300, 0))),
					slack.NewTextBlockObject(slack.PlainTextType, clipPlain(ch.Label, 30), false, false),
					slack.NewTextBlockObject(slack.PlainTextType, "Cancel", false, false))
				if ch.Style == cards.StyleDanger {
					b.Confirm.Style = slack.StyleDanger
				}
			}
			buttons = append(buttons, b)
		}
	}
	if c.Link != nil && okResponseURL(c.Link.URL) && len(c.Link.URL) <= 3000 && (c.Status == "" || c.Status.Open()) {
		label := c.Link.Label
		if strings.TrimSpace(label) == "" {
			label = "Open"
		}
		lb := slack.NewButtonBlockElement("link", "link", slack.NewTextBlockObject(slack.PlainTextType, clipPlain(label, MaxButtonText), false, false))
		lb.URL = c.Link.URL
		buttons = append(buttons, lb)
	} else if c.Link != nil {
		bl = append(bl, section(escape(clip(c.Link.Label+": "+c.Link.URL, MaxSectionText, 0))))
	}
	if len(buttons) > 0 {
		bl = append(bl, slack.NewActionBlock("choices", buttons...))
	}
	if len(bl) > MaxBlocks {
		return rendered{}, fmt.Errorf("card %s needs %d blocks; Slack allows %d", c.ID, len(bl), MaxBlocks)
	}
	fallback := c.Intent
	if s, ok := c.Status.Line(); ok {
		fallback += " — " + s
	}
	return rendered{text: escape(clipPlain(fallback, maxFallbackText)), blocks: bl}, nil
}

func isDecline(id string) bool { return id == "decline" || id == "deny" || id == "cancel" }
