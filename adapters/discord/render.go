package discord

import (
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/internal/lazyre"
)

// Rendering: a card is one message with one embed (title, description in
// Discord markdown) and buttons in action rows. Everything that is not our
// own markup goes through escapeMarkdown (prose) or codeBlock (commands and
// outputs), so user text can open no formatting, link or mention; and every
// message Silas creates or edits carries allowed_mentions with no parse
// targets, so even a literal "@everyone" pings nobody.

// Discord's limits, in characters (Discord counts Unicode code points).
const (
	MaxMessageLen     = 2000
	MaxEmbedTitle     = 256
	MaxEmbedDesc      = 4096
	MaxEmbedTotal     = 6000
	MaxButtonLabel    = 80
	MaxCustomID       = 100
	MaxButtonsPerRow  = 5
	MaxRows           = 5
	MaxButtons        = MaxButtonsPerRow * MaxRows
	ephemeral         = discordgo.MessageFlagsEphemeral
	truncMark         = "… (truncated)"
	colorOpen         = 0x5865F2
	colorDone         = 0x57F287
	colorBad          = 0xED4245
	colorNeutralState = 0x99AAB5
)

// noMentions is allowed_mentions with no parse targets.
func noMentions() *discordgo.MessageAllowedMentions {
	return &discordgo.MessageAllowedMentions{Parse: []discordgo.AllowedMentionType{}}
}

// Custom ids: "c:<card id>:<choice id>", the same opaque shape Telegram
// uses; the core validates card and choice.
var (
	cardIDRe   = lazyre.New(`^[A-Za-z0-9_-]{1,64}$`)
	choiceIDRe = lazyre.New(`^[A-Za-z0-9_-]{1,16}$`)
)

func customID(card cards.ID, choice string) (string, error) {
	if !cardIDRe.MatchString(string(card)) {
		return "", fmt.Errorf("card id %q cannot be carried in a Discord button", card)
	}
	if !choiceIDRe.MatchString(choice) {
		return "", fmt.Errorf("choice id %q cannot be carried in a Discord button", choice)
	}
	return "c:" + string(card) + ":" + choice, nil
}

// parseCustomID is the strict inverse of customID.
func parseCustomID(d string) (cards.ID, string, bool) {
	if len(d) > MaxCustomID {
		return "", "", false
	}
	rest, ok := strings.CutPrefix(d, "c:")
	if !ok {
		return "", "", false
	}
	id, ch, ok := strings.Cut(rest, ":")
	if !ok || !cardIDRe.MatchString(id) || !choiceIDRe.MatchString(ch) {
		return "", "", false
	}
	return cards.ID(id), ch, true
}

// markdownSpecial are the characters Discord markdown gives meaning to;
// "<" and "@" too, so "<@123>" and "@everyone" show literally even
// before allowed_mentions.
const markdownSpecial = "\\*_~`|>#-[]()<@"

// escapeMarkdown makes s show literally.
func escapeMarkdown(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	for _, r := range s {
		if strings.ContainsRune(markdownSpecial, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// codeBlock shows s verbatim in a fenced block. A "```" inside cannot end
// the block: a zero-width space is put between the backticks.
func codeBlock(s string) string {
	s = strings.ReplaceAll(s, "```", "`\u200b`\u200b`")
	if strings.HasSuffix(s, "`") {
		s += "\u200b"
	}
	return "```\n" + s + "\n```"
}

func runeLen(s string) int { return utf8.RuneCountInString(s) }

// cutRunes shortens s to at most n runes, marking the cut.
func cutRunes(s string, n int) string {
	if runeLen(s) <= n {
		return s
	}
	keep := n - runeLen(truncMark)
	if keep <= 0 {
		return string([]rune(truncMark)[:max(n, 0)])
	}
	return strings.TrimRight(string([]rune(s)[:keep]), " \n") + truncMark
}

// rendered is one message ready to send or edit.
type rendered struct {
	// state sums up a card's state (id, status, outcome, output) for
	// renderedHash; "" for text.
	state      string
	content    string
	embeds     []*discordgo.MessageEmbed
	components []discordgo.MessageComponent
}

// renderCard renders a card as one message. When the embed would exceed
// Discord's limits the inline output is cut first (its output_ref leads to
// the whole of it), then details, affected items and rationale. A card
// whose command cannot be shown in full loses its buttons: nobody is asked
// to approve what they cannot read.
func renderCard(c *cards.Card) (rendered, error) {
	if err := c.Validate(); err != nil {
		return rendered{}, err
	}
	comps, err := components(c)
	if err != nil {
		return rendered{}, err
	}
	cc := *c
	cc.AffectedItems = append([]string(nil), c.AffectedItems...)
	desc := cardDescription(&cc, false)
	over := func() int { return runeLen(desc) - MaxEmbedDesc }
	for _, f := range []*string{&cc.Output, &cc.Details, &cc.Rationale} {
		if n := over(); n > 0 && *f != "" {
			*f = cutRunes(*f, max(runeLen(*f)-n-2*runeLen(truncMark), 0))
			desc = cardDescription(&cc, false)
		}
	}
	for over() > 0 && len(cc.AffectedItems) > 0 {
		cc.AffectedItems = cc.AffectedItems[:len(cc.AffectedItems)-1]
		desc = cardDescription(&cc, false)
	}
	if over() > 0 {
		comps = linkOnly(c)
		desc = cardDescription(&cc, true)
		if n := over(); n > 0 {
			cc.Command = cutRunes(cc.Command, max(runeLen(cc.Command)-n-2*runeLen(truncMark), 0))
			desc = cardDescription(&cc, true)
		}
	}
	if over() > 0 {
		return rendered{}, fmt.Errorf("card %s does not fit in one Discord embed", c.ID)
	}
	title := cutRunes(c.Intent, MaxEmbedTitle-3)
	if m := c.Risk.Mark(); m != "" {
		title = m + " " + title
	}
	e := &discordgo.MessageEmbed{Title: title, Description: desc, Color: cardColor(c.Status)}
	state := strings.Join([]string{string(c.ID), string(c.Status), c.Outcome, c.Output, c.OutputRef}, "\x00")
	return rendered{state: state, embeds: []*discordgo.MessageEmbed{e}, components: comps}, nil
}

func cardColor(s cards.Status) int {
	switch s {
	case cards.StatusDone:
		return colorDone
	case cards.StatusFailed, cards.StatusRefused, cards.StatusInterrupted:
		return colorBad
	case cards.StatusDeclined, cards.StatusExpired:
		return colorNeutralState
	}
	return colorOpen
}

// cardDescription lays a card out in Discord markdown.
func cardDescription(c *cards.Card, commandClipped bool) string {
	var b strings.Builder
	if c.Risk != "" {
		b.WriteString("*Risk: " + escapeMarkdown(string(c.Risk)) + "*\n")
	}
	if c.Rationale != "" {
		b.WriteString(escapeMarkdown(c.Rationale) + "\n")
	}
	if c.Command != "" {
		b.WriteString(codeBlock(c.Command) + "\n")
	}
	if commandClipped {
		b.WriteString("*The command is too long to show here in full, so it cannot be approved from Discord.*\n")
	}
	for _, it := range c.AffectedItems {
		b.WriteString("• " + escapeMarkdown(it) + "\n")
	}
	if c.Details != "" {
		if c.DetailsExpanded() {
			b.WriteString(escapeMarkdown(c.Details) + "\n")
		} else {
			// Spoiler: collapsed until clicked, Discord's closest to an
			// expandable block.
			b.WriteString("||" + escapeMarkdown(c.Details) + "||\n")
		}
	}
	if c.Outcome != "" {
		b.WriteString("**Result:** " + escapeMarkdown(c.Outcome) + "\n")
	}
	if c.Output != "" {
		b.WriteString(codeBlock(c.Output) + "\n")
	}
	if c.OutputRef != "" {
		b.WriteString("Full output stored as `" + strings.ReplaceAll(c.OutputRef, "`", "'") + "`\n")
	}
	if c.Link != nil && !linkButtonOK(c.Link.URL) {
		b.WriteString(escapeMarkdown(c.Link.Label) + ": " + escapeMarkdown(c.Link.URL) + "\n")
	}
	if s, ok := c.Status.Line(); ok {
		b.WriteString("*" + s + "*\n")
	}
	if c.Open() && c.ExpiresAt != "" {
		b.WriteString("*Decide before " + escapeMarkdown(c.ExpiresAt) + "*\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// buttonStyle maps the card's style hint: the recommended (primary) choice
// is green, destructive ones red.
func buttonStyle(s cards.Style) discordgo.ButtonStyle {
	switch s {
	case cards.StylePrimary:
		return discordgo.SuccessButton
	case cards.StyleDanger:
		return discordgo.DangerButton
	}
	return discordgo.SecondaryButton
}

// components builds the buttons: the card's choices in order while it is
// open, then the secure-input link; five to a row.
func components(c *cards.Card) ([]discordgo.MessageComponent, error) {
	var buttons []discordgo.MessageComponent
	if c.Open() {
		for _, ch := range c.Choices {
			id, err := customID(c.ID, ch.ID)
			if err != nil {
				return nil, err
			}
			buttons = append(buttons, discordgo.Button{Label: cutRunes(ch.Label, MaxButtonLabel), Style: buttonStyle(ch.Style), CustomID: id})
		}
	}
	buttons = append(buttons, linkButtons(c)...)
	if len(buttons) > MaxButtons {
		return nil, fmt.Errorf("card %s has %d buttons; Discord shows at most %d", c.ID, len(buttons), MaxButtons)
	}
	return rows(buttons), nil
}

func linkButtons(c *cards.Card) []discordgo.MessageComponent {
	if c.Link == nil || !linkButtonOK(c.Link.URL) || (c.Status != "" && !c.Status.Open()) {
		return nil
	}
	label := strings.TrimSpace(c.Link.Label)
	if label == "" {
		label = "Open"
	}
	return []discordgo.MessageComponent{discordgo.Button{Label: cutRunes(label, MaxButtonLabel), Style: discordgo.LinkButton, URL: c.Link.URL}}
}

func linkOnly(c *cards.Card) []discordgo.MessageComponent { return rows(linkButtons(c)) }

func rows(buttons []discordgo.MessageComponent) []discordgo.MessageComponent {
	out := []discordgo.MessageComponent{}
	for len(buttons) > 0 {
		n := min(len(buttons), MaxButtonsPerRow)
		out = append(out, discordgo.ActionsRow{Components: buttons[:n]})
		buttons = buttons[n:]
	}
	return out
}

// linkButtonOK reports whether Discord accepts u in a link button
// (http/https with a host); others are shown as text.
func linkButtonOK(u string) bool {
	p, err := url.Parse(u)
	return err == nil && (p.Scheme == "https" || p.Scheme == "http") && p.Host != "" && len(u) <= 512
}
