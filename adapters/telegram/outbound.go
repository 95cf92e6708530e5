package telegram

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core"
)

// Outbound: Send and Update. A core.MessageRef is "<chat id>:<message id>".
//
//   - A text longer than MaxMessageLen is split on line boundaries into
//     several messages; Send returns the ref of the FIRST part. If a later
//     part fails, the retried Send skips the parts already sent (remembered
//     in memory for an hour).
//   - A message with both text and a card is sent as the text (possibly in
//     parts) followed by the card; Send returns the card's ref.
//   - A card is always one message: its inline output is shortened to fit
//     (see renderCard) and its output_ref is shown.
//   - Update edits the one message the ref names. For a split text that is
//     the first part; the new text is cut to one message and the other parts
//     stay as they were. Editing to identical content is not an error. When
//     the message is gone (deleted by a user) the new content is sent as a
//     new message and later updates of the same ref edit that one.

// ref builds a MessageRef.
func ref(chat int64, msg int) core.MessageRef {
	return core.MessageRef(strconv.FormatInt(chat, 10) + ":" + strconv.Itoa(msg))
}

func parseRef(r core.MessageRef) (int64, int, bool) {
	c, m, ok := strings.Cut(string(r), ":")
	if !ok {
		return 0, 0, false
	}
	chat, err1 := strconv.ParseInt(c, 10, 64)
	msg, err2 := strconv.Atoi(m)
	if err1 != nil || err2 != nil || chat == 0 || msg <= 0 {
		return 0, 0, false
	}
	return chat, msg, true
}

// chatOf returns the chat id of one of this channel's conversations.
func (a *Adapter) chatOf(conv core.ConversationID) (int64, error) {
	rest, ok := strings.CutPrefix(string(conv), string(a.cfg.Name)+":")
	if !ok {
		return 0, kit.Permanentf("telegram: conversation %q is not a %s conversation", conv, a.cfg.Name)
	}
	chat, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || chat == 0 {
		return 0, kit.Permanentf("telegram: conversation %q has no chat id", conv)
	}
	return chat, nil
}

// Send implements core.Channel.
func (a *Adapter) Send(ctx context.Context, m core.OutMessage) (core.MessageRef, error) {
	chat, err := a.chatOf(m.Conversation)
	if err != nil {
		return "", err
	}
	var msgs []rendered
	for _, p := range kit.TextParts(m.Text, MaxMessageLen, escapedWidth) {
		msgs = append(msgs, rendered{html: escapeHTML(p)})
	}
	textParts := len(msgs)
	if m.Card != nil {
		r, err := renderCard(m.Card)
		if err != nil {
			return "", kit.Permanentf("telegram: %w", err)
		}
		msgs = append(msgs, r)
	}
	return kit.SendParts(a.splits, m, msgs, textParts, "telegram", func(_ int, r rendered) (core.MessageRef, error) {
		return a.sendRendered(ctx, chat, r)
	})
}

func (a *Adapter) sendRendered(ctx context.Context, chat int64, r rendered) (core.MessageRef, error) {
	release, err := a.limitWait(ctx, chat)
	if err != nil {
		return "", fmt.Errorf("telegram: sendMessage: waiting for the rate limit: %w", err)
	}
	defer release()
	p := &bot.SendMessageParams{ChatID: chat, Text: r.html, ParseMode: models.ParseModeHTML,
		LinkPreviewOptions: &models.LinkPreviewOptions{IsDisabled: bot.True()}}
	if r.keyboard != nil {
		p.ReplyMarkup = r.keyboard
	}
	msg, err := a.bot.SendMessage(ctx, p)
	if err != nil {
		return "", a.outboundError(chat, "sendMessage", err)
	}
	if msg == nil || msg.ID <= 0 {
		return "", fmt.Errorf("telegram: sendMessage: answer without a message id")
	}
	return ref(chat, msg.ID), nil
}

// outboundError maps err and pauses the chat on a 429.
func (a *Adapter) outboundError(chat int64, op string, err error) error {
	err = mapError(op, err)
	var rl *core.RateLimitedError
	if errors.As(err, &rl) {
		a.lim.Pause(chat, rl.RetryAfter)
	}
	return err
}

// Update implements core.Channel: edit the message in place; buttons are
// removed once the card no longer takes taps.
func (a *Adapter) Update(ctx context.Context, r core.MessageRef, m core.OutMessage) error {
	r = a.moved.Resolve(r)
	chat, msgID, ok := parseRef(r)
	if !ok {
		return kit.Permanentf("telegram: %q is not a Telegram message reference", r)
	}
	var out rendered
	switch {
	case m.Card != nil:
		var err error
		if out, err = renderCard(m.Card); err != nil {
			return kit.Permanentf("telegram: %w", err)
		}
	case strings.TrimSpace(m.Text) != "":
		text := m.Text
		if parts := kit.SplitText(text, MaxMessageLen-textLen(truncMark), escapedWidth); len(parts) > 1 {
			text = parts[0] + truncMark
		}
		out = rendered{html: escapeHTML(text)}
	default:
		return kit.Permanent(errors.New("telegram: nothing to show (empty text and no card)"))
	}
	release, err := a.limitWait(ctx, chat)
	if err != nil {
		return fmt.Errorf("telegram: editMessageText: waiting for the rate limit: %w", err)
	}
	p := &bot.EditMessageTextParams{ChatID: chat, MessageID: msgID, Text: out.html, ParseMode: models.ParseModeHTML,
		LinkPreviewOptions: &models.LinkPreviewOptions{IsDisabled: bot.True()}}
	if out.keyboard != nil {
		// Without reply_markup, editMessageText removes the keyboard.
		p.ReplyMarkup = out.keyboard
	}
	_, err = a.bot.EditMessageText(ctx, p)
	release()
	switch {
	case err == nil, isNotModified(err):
		return nil
	case isMessageGone(err):
		a.log.Info("telegram: the message to edit is gone; sending the new state as a new message",
			slog.String("ref", string(r)))
		nr, err := a.sendRendered(ctx, chat, out)
		if err != nil {
			return err
		}
		a.moved.Record(r, nr)
		return nil
	}
	return a.outboundError(chat, "editMessageText", err)
}

// DeleteMessage implements core.MessageDeleter (for example a message that
// contained a credential). platformMessageID is Telegram's message_id. A
// message that is already gone is not an error.
func (a *Adapter) DeleteMessage(ctx context.Context, conv core.ConversationID, platformMessageID string) error {
	chat, err := a.chatOf(conv)
	if err != nil {
		return err
	}
	id, err := strconv.Atoi(platformMessageID)
	if err != nil || id <= 0 {
		return kit.Permanentf("telegram: %q is not a message id", platformMessageID)
	}
	_, err = a.bot.DeleteMessage(ctx, &bot.DeleteMessageParams{ChatID: chat, MessageID: id})
	if err == nil || isMessageGone(err) {
		return nil
	}
	return mapError("deleteMessage", err)
}

// isGroup reports whether a chat id names a group, supergroup or channel
// (negative ids); private chats have the user's positive id. Groups have
// their own per-minute limit.
func isGroup(chat int64) bool { return chat < 0 }
