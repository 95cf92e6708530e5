package discord

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/commands/catalog"
	"github.com/silas-gateway/silas/internal/lazyre"
)

// Inbound conversion: one message or interaction becomes at most one
// core.Turn. Pure functions (no clock, no I/O) that must never panic on any
// input (FuzzMessageToTurn, FuzzInteractionToTurn).

type action int

const (
	actIgnore action = iota
	actDeliver
	actMalformed
	// actRefuse: an interaction Silas must answer but not deliver (an
	// unknown button, a channel not allowed); reason is shown to the user.
	actRefuse
)

type inbound struct {
	act    action
	turn   core.Turn
	reason string
	// guild and user are where and who, for the conversation records.
	guild, user string
	// typed is set for a tap typed as text ("approve <id>", or "1"
	// replying to a card): its answer goes to the chat as a message.
	typed bool
}

func conversation(ch core.ChannelName, channelID string) core.ConversationID {
	return core.ConversationID(string(ch) + ":" + channelID)
}

func identity(user string) core.IdentityID { return core.IdentityID("discord:" + user) }

// messageRef builds a MessageRef "<channel id>:<message id>".
func messageRef(channel, msg string) core.MessageRef { return core.MessageRef(channel + ":" + msg) }

func parseRef(r core.MessageRef) (channel, msg string, ok bool) {
	channel, msg, ok = strings.Cut(string(r), ":")
	if !ok || !snowflakeRe.MatchString(channel) || !snowflakeRe.MatchString(msg) {
		return "", "", false
	}
	return channel, msg, true
}

// where is what the adapter knows of a message's place: the guild ("" for
// a DM) and whether guild channels there are allowed.
type where struct {
	guild   string
	allowed bool
}

var mentionRe = lazyre.New(`<@!?([0-9]{1,20})>`)

// messageToTurn converts a message. me is the bot's user id ("" when not
// yet known: then guild messages cannot be told to address the bot and are
// ignored). method is the evidence method.
func messageToTurn(m *discordgo.Message, w where, me string, ch core.ChannelName, method string) inbound {
	switch {
	case m == nil:
		return inbound{act: actMalformed, reason: "empty message"}
	case !snowflakeRe.MatchString(m.ID) || !snowflakeRe.MatchString(m.ChannelID):
		return inbound{act: actMalformed, reason: "message or channel id is not a snowflake"}
	case m.Author == nil:
		return inbound{act: actIgnore, reason: "message without an author"}
	case m.Author.Bot || m.Author.System || m.WebhookID != "":
		return inbound{act: actIgnore, reason: "message from a bot, a webhook or the system"}
	case !snowflakeRe.MatchString(m.Author.ID):
		return inbound{act: actMalformed, reason: "author id is not a snowflake"}
	case m.Type != discordgo.MessageTypeDefault && m.Type != discordgo.MessageTypeReply:
		return inbound{act: actIgnore, reason: "not a user's text message"}
	}
	if !utf8.ValidString(m.Content) {
		return inbound{act: actMalformed, reason: "content is not valid UTF-8"}
	}
	in := inbound{guild: w.guild, user: m.Author.ID}
	kind := core.ChatDirect
	text := strings.TrimSpace(m.Content)
	if w.guild != "" {
		kind = core.ChatGroup
		if !w.allowed {
			in.act, in.reason = actIgnore, "guild channel not in discord.guilds"
			return in
		}
		addressed := false
		if me != "" {
			for _, u := range m.Mentions {
				if u != nil && u.ID == me {
					addressed = true
				}
			}
			for _, sm := range mentionRe.FindAllStringSubmatch(text, -1) {
				if sm[1] == me {
					addressed = true
				}
			}
			if r := m.ReferencedMessage; r != nil && r.Author != nil && r.Author.ID == me {
				addressed = true
			}
		}
		if !addressed {
			in.act, in.reason = actIgnore, "guild message not addressed to the bot"
			return in
		}
		text = strings.TrimSpace(mentionRe.ReplaceAllStringFunc(text, func(s string) string {
			if mentionRe.FindStringSubmatch(s)[1] == me {
				return ""
			}
			return s
		}))
		text = strings.Join(strings.Fields(text), " ")
	}
	text = strings.TrimSpace(text)
	if text == "" {
		in.act, in.reason = actIgnore, "no text (an attachment, or content withheld without the Message Content intent)"
		return in
	}
	t := core.Turn{Channel: ch, Conversation: conversation(ch, m.ChannelID), Sender: identity(m.Author.ID),
		SenderName: displayName(m.Author), EventID: "m" + m.ID, ChatKind: kind,
		Evidence: core.Evidence{Authenticated: true, Method: method}}
	if !m.Timestamp.IsZero() {
		t.At = m.Timestamp.UTC()
	}
	if r := m.ReferencedMessage; r != nil && r.Author != nil && me != "" && r.Author.ID == me && r.ID != "" {
		// A reply to the bot's own message (message_reference): its ref as
		// the outbox recorded it, so a flow's card takes the reply.
		t.ReplyTo = messageRef(m.ChannelID, r.ID)
	}
	// The text fallback: a typed choice becomes the very Tap a button
	// sends, which the core validates like one (card, conversation,
	// approver, state). Only it is delivered: the words are not a message.
	if tap, ok := kit.ParseTextTap(text, quotedCard(m.ReferencedMessage, me)); ok {
		t.Tap = &tap
		in.act, in.turn, in.typed = actDeliver, t, true
		return in
	}
	// Not a tap: "run …", "stop" and the other commands typed without
	// the slash are read through the one command catalog.
	t.PlatformMessageID, t.Text = m.ID, catalog.Text(text)
	in.act, in.turn = actDeliver, t
	return in
}

// quotedCard is the open card a message replies to, read from the quoted
// message's buttons, or nil. Only the bot's own messages count (anyone can
// quote a message carrying buttons with our custom ids, but only the bot
// can author one). Every button must name the same card; the choices keep
// their order, which is the numbering cards.PlainText shows.
func quotedCard(r *discordgo.Message, me string) *kit.Quoted {
	if r == nil || r.Author == nil || me == "" || r.Author.ID != me {
		return nil
	}
	var q kit.Quoted
	for _, row := range r.Components {
		var inner []discordgo.MessageComponent
		switch ar := row.(type) {
		case *discordgo.ActionsRow:
			inner = ar.Components
		case discordgo.ActionsRow:
			inner = ar.Components
		default:
			continue
		}
		for _, c := range inner {
			var id string
			switch b := c.(type) {
			case *discordgo.Button:
				id = b.CustomID
			case discordgo.Button:
				id = b.CustomID
			}
			if id == "" {
				continue // a link button
			}
			card, choice, ok := parseCustomID(id)
			if !ok || (q.Card != "" && card != q.Card) {
				return nil
			}
			q.Card = card
			q.Choices = append(q.Choices, choice)
		}
	}
	if q.Card == "" {
		return nil
	}
	return &q
}

func displayName(u *discordgo.User) string {
	n := strings.TrimSpace(u.GlobalName)
	if n == "" {
		n = u.Username
	}
	if utf8.RuneCountInString(n) > 64 {
		n = string([]rune(n)[:64])
	}
	return strings.ToValidUTF8(n, "�")
}

// interactionUser is who acted: the member's user in a guild, the user in
// a DM.
func interactionUser(i *discordgo.Interaction) *discordgo.User {
	if i.Member != nil && i.Member.User != nil {
		return i.Member.User
	}
	return i.User
}

// isCommand: name is an application command Silas registers (the
// catalog's menu); its options become the text the engine parses.
func isCommand(name string) bool {
	c, ok := catalog.Lookup(name)
	return ok && c.Menu && c.Name == name
}

// interactionToTurn converts an application command (slash command) or a
// button tap. allowed tells whether a guild channel is allowed.
func interactionToTurn(i *discordgo.Interaction, allowed func(guild, channel string) bool, ch core.ChannelName, method string) inbound {
	if i == nil || !snowflakeRe.MatchString(i.ID) || i.Token == "" {
		return inbound{act: actMalformed, reason: "interaction without an id or token"}
	}
	u := interactionUser(i)
	if u == nil || !snowflakeRe.MatchString(u.ID) || u.Bot {
		return inbound{act: actMalformed, reason: "interaction without a human user"}
	}
	if !snowflakeRe.MatchString(i.ChannelID) {
		return inbound{act: actMalformed, reason: "interaction without a channel"}
	}
	in := inbound{guild: i.GuildID, user: u.ID}
	kind := core.ChatDirect
	if i.GuildID != "" {
		kind = core.ChatGroup
		if !allowed(i.GuildID, i.ChannelID) {
			in.act, in.reason = actRefuse, "Silas does not answer in this channel."
			return in
		}
	}
	t := core.Turn{Channel: ch, Conversation: conversation(ch, i.ChannelID), Sender: identity(u.ID), SenderName: displayName(u),
		EventID: "i" + i.ID, ChatKind: kind, Evidence: core.Evidence{Authenticated: true, Method: method}}
	switch i.Type {
	case discordgo.InteractionApplicationCommand:
		d, ok := i.Data.(discordgo.ApplicationCommandInteractionData)
		if !ok || !isCommand(d.Name) {
			in.act, in.reason = actRefuse, "Unknown command."
			return in
		}
		text := "/" + d.Name
		for _, o := range d.Options {
			if o == nil {
				continue
			}
			var v string
			switch o.Type {
			case discordgo.ApplicationCommandOptionString:
				v, _ = o.Value.(string)
			case discordgo.ApplicationCommandOptionInteger, discordgo.ApplicationCommandOptionNumber:
				if f, ok := o.Value.(float64); ok {
					v = strconv.FormatFloat(f, 'f', -1, 64)
				}
			}
			if v = strings.TrimSpace(v); v != "" {
				text += " " + v
			}
		}
		if !utf8.ValidString(text) {
			return inbound{act: actMalformed, reason: "command option is not valid UTF-8"}
		}
		t.Text = text
	case discordgo.InteractionMessageComponent:
		d, ok := i.Data.(discordgo.MessageComponentInteractionData)
		if !ok {
			in.act, in.reason = actRefuse, "Unknown button."
			return in
		}
		card, choice, ok := parseCustomID(d.CustomID)
		if !ok {
			in.act, in.reason = actRefuse, "Unknown button."
			return in
		}
		t.Tap = &core.Tap{Card: card, Choice: choice}
	default:
		in.act, in.reason = actRefuse, "This kind of interaction is not handled."
		return in
	}
	in.act, in.turn = actDeliver, t
	return in
}
