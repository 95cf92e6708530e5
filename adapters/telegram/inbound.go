package telegram

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/go-telegram/bot/models"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/commands/catalog"
)

// Inbound conversion: one Telegram update becomes at most one core.Turn.
// The adapter reports facts (who, where, what, how authenticated); it never
// decides trust. Group messages that do not address the bot are not ours
// and are dropped here; direct chats are all delivered (the core applies
// the DM access policy from Turn.ChatKind).

// botInfo is who the bot is, for telling whether a group message addresses
// it.
type botInfo struct {
	id       int64  // from the token's prefix
	username string // without "@"
}

// action says what to do with a converted update.
type action int

const (
	// actIgnore: not for Silas (a group message not addressed to the bot,
	// a service message, another bot); acknowledged and dropped.
	actIgnore action = iota
	// actDeliver: hand the turn to the core.
	actDeliver
	// actMalformed: the update makes no sense; logged and dropped.
	actMalformed
	// actUnknownButton: a tap whose data is not ours; answered "Unknown
	// button" and dropped.
	actUnknownButton
)

func (a action) String() string {
	switch a {
	case actIgnore:
		return "ignore"
	case actDeliver:
		return "deliver"
	case actMalformed:
		return "malformed"
	case actUnknownButton:
		return "unknown_button"
	}
	return "?"
}

// inbound is the result of converting one update.
type inbound struct {
	act  action
	turn core.Turn
	// reason explains ignore/malformed/unknown_button for the log.
	reason string
	// queryID is the callback query to answer (taps only).
	queryID string
	// tapped is the message whose button was tapped (taps only; empty when
	// Telegram did not say).
	tapped core.MessageRef
	// typed is set for a tap typed as text ("approve <id>", or "1" in reply
	// to a card): it has no callback query, so its answer is a message.
	typed bool
}

// eventID is the turn's event id for an update: "u<update_id>", so a
// redelivered update is a no-op at the core's idempotent intake.
func eventID(updateID int64) string { return "u" + strconv.FormatInt(updateID, 10) }

// conversation builds "<channel>:<chat id>".
func conversation(ch core.ChannelName, chat int64) core.ConversationID {
	return core.ConversationID(string(ch) + ":" + strconv.FormatInt(chat, 10))
}

// identity builds "telegram:<user id>".
func identity(user int64) core.IdentityID {
	return core.IdentityID("telegram:" + strconv.FormatInt(user, 10))
}

// decodeUpdate decodes one update. The update id is returned whenever it
// can be read, even if the rest is malformed, so polling can move past it.
func decodeUpdate(raw []byte) (int64, *models.Update, error) {
	// Almost every update decodes whole with a positive id: one pass over
	// it, not two (a third of the poll loop's CPU was these decodes). The
	// id alone is read only when that fails — then, as before, to tell a
	// missing update_id from a malformed rest. Where the whole decode
	// succeeds, the id decode would have read the same id (the same
	// decoder, the same key matching), so the result is the same.
	var whole models.Update
	if json.Unmarshal(raw, &whole) == nil && whole.ID > 0 {
		return whole.ID, &whole, nil
	}
	return decodeUpdateTwoPass(raw)
}

// decodeUpdateTwoPass is decodeUpdate without its fast path: the id
// first, then the whole update (FuzzDecodeUpdateAsTwoPass holds the two
// to the same results).
func decodeUpdateTwoPass(raw []byte) (int64, *models.Update, error) {
	var head struct {
		ID *int64 `json:"update_id"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return 0, nil, fmt.Errorf("update is not a JSON object: %w", err)
	}
	if head.ID == nil {
		return 0, nil, errors.New("update has no update_id")
	}
	var u models.Update
	if err := json.Unmarshal(raw, &u); err != nil {
		return *head.ID, nil, fmt.Errorf("update %d: %w", *head.ID, err)
	}
	return *head.ID, &u, nil
}

// updateToTurn converts an update. It is pure (no clock, no I/O) and must
// never panic on any input (FuzzUpdateToTurn).
func updateToTurn(u *models.Update, me botInfo, ch core.ChannelName, method string) inbound {
	if u == nil {
		return inbound{act: actMalformed, reason: "empty update"}
	}
	if u.ID <= 0 {
		return inbound{act: actMalformed, reason: "update_id must be positive"}
	}
	base := core.Turn{Channel: ch, EventID: eventID(u.ID), Evidence: core.Evidence{Authenticated: true, Method: method}}
	switch {
	case u.Message != nil:
		return messageToTurn(u.Message, me, base)
	case u.CallbackQuery != nil:
		return callbackToTurn(u.CallbackQuery, base)
	case u.EditedMessage != nil:
		// Editing "/run x" into "/run y" must not run anything again.
		return inbound{act: actIgnore, reason: "edited message"}
	default:
		return inbound{act: actIgnore, reason: "update type not handled"}
	}
}

func chatKind(t models.ChatType) (string, bool) {
	switch t {
	case models.ChatTypePrivate:
		return core.ChatDirect, true
	case models.ChatTypeGroup, models.ChatTypeSupergroup:
		return core.ChatGroup, true
	}
	return "", false
}

func messageToTurn(m *models.Message, me botInfo, t core.Turn) inbound {
	switch {
	case m.From == nil:
		return inbound{act: actIgnore, reason: "message without a sender"}
	case m.SenderChat != nil:
		return inbound{act: actIgnore, reason: "message sent on behalf of a chat (anonymous admin or channel)"}
	case m.From.IsBot:
		return inbound{act: actIgnore, reason: "message from a bot"}
	case m.From.ID <= 0:
		return inbound{act: actMalformed, reason: "sender id must be positive"}
	case m.Chat.ID == 0:
		return inbound{act: actMalformed, reason: "message without a chat id"}
	}
	kind, ok := chatKind(m.Chat.Type)
	if !ok {
		return inbound{act: actIgnore, reason: fmt.Sprintf("chat type %q not handled", m.Chat.Type)}
	}
	if kind == core.ChatDirect && m.Chat.ID != m.From.ID {
		return inbound{act: actMalformed, reason: "private chat id differs from the sender's id"}
	}
	if kind == core.ChatGroup && m.Chat.ID > 0 {
		return inbound{act: actMalformed, reason: "group with a positive chat id"}
	}
	if m.Text == "" {
		return inbound{act: actIgnore, reason: "not a text message"}
	}
	if !utf8.ValidString(m.Text) {
		return inbound{act: actMalformed, reason: "text is not valid UTF-8"}
	}
	text, addressed := normalizeText(m, me)
	if kind == core.ChatGroup && !addressed {
		return inbound{act: actIgnore, reason: "group message not addressed to the bot"}
	}
	if strings.TrimSpace(text) == "" {
		return inbound{act: actIgnore, reason: "nothing left after the mention"}
	}
	t.Conversation = conversation(t.Channel, m.Chat.ID)
	t.Sender = identity(m.From.ID)
	t.SenderName = displayName(m.From)
	t.ChatKind = kind
	if m.Date > 0 {
		t.At = time.Unix(int64(m.Date), 0).UTC()
	}
	// The text fallback: a typed choice becomes the very Tap a button
	// sends, which the core validates like one (card, conversation,
	// approver, state). Only it is delivered: the words are not a message.
	if tap, ok := kit.ParseTextTap(text, quotedCard(m.ReplyToMessage, me)); ok {
		t.Tap = &tap
		return inbound{act: actDeliver, turn: t, typed: true}
	}
	t.PlatformMessageID = strconv.Itoa(m.ID)
	if r := m.ReplyToMessage; r != nil && r.From != nil && me.id != 0 && r.From.ID == me.id {
		t.ReplyTo = ref(m.Chat.ID, r.ID) // a card's ref, when r is one
	}
	// Commands typed without the slash ("stop") read as the one command
	// catalog reads them (catalog.Short: "run …" stays the agent's).
	t.Text = catalog.Short(text)
	return inbound{act: actDeliver, turn: t}
}

// quotedCard is the open card a message replies to, read from the quoted
// message's buttons, or nil. Only the bot's own messages count: anyone can
// quote a message of theirs that carries buttons with our callback data.
// Every button must name the same card; the choices keep their order, which
// is the numbering cards.PlainText shows.
func quotedCard(r *models.Message, me botInfo) *kit.Quoted {
	if r == nil || r.From == nil || me.id == 0 || r.From.ID != me.id || r.ReplyMarkup == nil {
		return nil
	}
	var q kit.Quoted
	for _, row := range r.ReplyMarkup.InlineKeyboard {
		for _, b := range row {
			card, choice, ok := parseCallbackData(b.CallbackData)
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

func callbackToTurn(q *models.CallbackQuery, t core.Turn) inbound {
	if q.ID == "" {
		return inbound{act: actMalformed, reason: "callback query without an id"}
	}
	unknown := func(reason string) inbound {
		return inbound{act: actUnknownButton, reason: reason, queryID: q.ID}
	}
	if q.From.ID <= 0 || q.From.IsBot {
		return unknown("tap without a human sender")
	}
	var chat *models.Chat
	var msgID int
	switch {
	case q.Message.Type == models.MaybeInaccessibleMessageTypeMessage && q.Message.Message != nil:
		chat, msgID = &q.Message.Message.Chat, q.Message.Message.ID
	case q.Message.Type == models.MaybeInaccessibleMessageTypeInaccessibleMessage && q.Message.InaccessibleMessage != nil:
		chat, msgID = &q.Message.InaccessibleMessage.Chat, q.Message.InaccessibleMessage.MessageID
	default:
		return unknown("tap on a message that is not in a chat (inline mode)")
	}
	kind, ok := chatKind(chat.Type)
	switch {
	case chat.ID == 0 || !ok:
		return unknown("tap in a chat Silas does not talk in")
	case kind == core.ChatDirect && chat.ID != q.From.ID:
		return unknown("private chat id differs from the tapper's id")
	case kind == core.ChatGroup && chat.ID > 0:
		return unknown("group with a positive chat id")
	}
	card, choice, ok := parseCallbackData(q.Data)
	if !ok {
		return unknown("callback data is not a Silas button")
	}
	t.Conversation = conversation(t.Channel, chat.ID)
	t.Sender = identity(q.From.ID)
	t.SenderName = displayName(&q.From)
	t.ChatKind = kind
	t.Tap = &core.Tap{Card: card, Choice: choice}
	in := inbound{act: actDeliver, turn: t, queryID: q.ID}
	if msgID > 0 {
		in.tapped = ref(chat.ID, msgID)
	}
	return in
}

// displayName is for display only; trust is bound to the numeric id.
func displayName(u *models.User) string {
	n := strings.TrimSpace(u.FirstName + " " + u.LastName)
	if n == "" && u.Username != "" {
		n = "@" + u.Username
	}
	if utf8.RuneCountInString(n) > 64 {
		n = string([]rune(n)[:64])
	}
	return strings.ToValidUTF8(n, "�")
}

// normalizeText removes the bot's @mention and the @botname suffix of a
// leading /command, and reports whether the message addresses the bot: a
// mention (@username or a text mention of the bot), a /command@botname, or
// a reply to one of the bot's messages. A leading /command@otherbot is for
// another bot, whatever else the message says.
//
// Entity offsets are UTF-16 code units; entities out of bounds are ignored.
func normalizeText(m *models.Message, me botInfo) (string, bool) {
	u16 := utf16.Encode([]rune(m.Text))
	type cut struct{ start, end int }
	var cuts []cut
	addressed, other := false, false
	for _, e := range m.Entities {
		if e.Offset < 0 || e.Length <= 0 || e.Offset > len(u16) || e.Length > len(u16)-e.Offset {
			continue
		}
		s := string(utf16.Decode(u16[e.Offset : e.Offset+e.Length]))
		switch e.Type {
		case models.MessageEntityTypeMention:
			if me.username != "" && strings.EqualFold(s, "@"+me.username) {
				addressed = true
				cuts = append(cuts, cut{e.Offset, e.Offset + e.Length})
			}
		case models.MessageEntityTypeTextMention:
			if e.User != nil && me.id != 0 && e.User.ID == me.id {
				addressed = true
				cuts = append(cuts, cut{e.Offset, e.Offset + e.Length})
			}
		case models.MessageEntityTypeBotCommand:
			if e.Offset != 0 {
				continue
			}
			cmd, target, has := strings.Cut(s, "@")
			if !has {
				continue
			}
			if me.username != "" && strings.EqualFold(target, me.username) {
				addressed = true
				cuts = append(cuts, cut{e.Offset + len(utf16.Encode([]rune(cmd))), e.Offset + e.Length})
			} else {
				other = true
			}
		}
	}
	if r := m.ReplyToMessage; r != nil && r.From != nil && me.id != 0 && r.From.ID == me.id {
		addressed = true
	}
	if other {
		addressed = false
	}
	if len(cuts) == 0 {
		return strings.TrimSpace(m.Text), addressed
	}
	slices.SortFunc(cuts, func(a, b cut) int { return a.start - b.start })
	out := make([]uint16, 0, len(u16))
	pos := 0
	for _, c := range cuts {
		if c.start < pos {
			continue // overlapping entities: keep the first
		}
		out = append(out, u16[pos:c.start]...)
		pos = c.end
		// "hey @bot run" → "hey run", not "hey  run".
		if pos < len(u16) && u16[pos] == ' ' && (len(out) == 0 || out[len(out)-1] == ' ' || out[len(out)-1] == '\n') {
			pos++
		}
	}
	out = append(out, u16[pos:]...)
	return strings.TrimSpace(string(utf16.Decode(out))), addressed
}
