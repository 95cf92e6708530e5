package slack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/slack-go/slack"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core"
)

// Outbound: Send, Update, DeleteMessage and ephemeral notices. A
// core.MessageRef is "<channel id>:<ts>".
//
//   - Every call waits for the channel's budget (about one call per second
//     per channel, by any method) and the global one; chat.update and
//     chat.delete also for Tier 3's per-minute budget, chat.postEphemeral
//     for Tier 4's. After a 429 the channel is paused for Retry-After, so
//     nothing is sent to it by any method before then, and the outbox gets
//     a *core.RateLimitedError to wait as long.
//   - A text longer than MaxMessageLen is split on line boundaries; Send
//     returns the ref of the first part and a retried Send skips the parts
//     already sent (kit.Splits). A card is always one message (render.go).
//   - Replies in a thread conversation go to its thread_ts.
//   - Update edits with chat.update. When the message is gone the new
//     state is posted as a new message and later updates edit that one.

func ref(channel, ts string) core.MessageRef { return core.MessageRef(channel + ":" + ts) }

func parseRef(r core.MessageRef) (string, string, bool) {
	c, ts, ok := strings.Cut(string(r), ":")
	if !ok || !idRe.MatchString(c) || !tsRe.MatchString(ts) {
		return "", "", false
	}
	return c, ts, true
}

// chatOf returns the channel and thread of a conversation.
func (a *Adapter) chatOf(conv core.ConversationID) (string, string, error) {
	rest, ok := strings.CutPrefix(string(conv), string(a.cfg.Name)+":")
	if !ok {
		return "", "", kit.Permanentf("slack: conversation %q is not a %s conversation", conv, a.cfg.Name)
	}
	ch, thread, _ := strings.Cut(rest, ":")
	if !idRe.MatchString(ch) || (thread != "" && !tsRe.MatchString(thread)) {
		return "", "", kit.Permanentf("slack: conversation %q has no channel id", conv)
	}
	return ch, thread, nil
}

// Send implements core.Channel.
func (a *Adapter) Send(ctx context.Context, m core.OutMessage) (core.MessageRef, error) {
	channel, thread, err := a.chatOf(m.Conversation)
	if err != nil {
		return "", err
	}
	var msgs []rendered
	for _, p := range kit.TextParts(m.Text, MaxMessageLen, escapedWidth) {
		msgs = append(msgs, rendered{text: escape(p)})
	}
	textParts := len(msgs)
	if m.Card != nil {
		r, err := renderCard(m.Card)
		if err != nil {
			return "", kit.Permanentf("slack: %w", err)
		}
		msgs = append(msgs, r)
	}
	return kit.SendParts(a.splits, m, msgs, textParts, "slack", func(_ int, r rendered) (core.MessageRef, error) {
		return a.post(ctx, channel, thread, r)
	})
}

func msgOptions(r rendered) []slack.MsgOption {
	opts := []slack.MsgOption{slack.MsgOptionText(r.text, false), slack.MsgOptionDisableLinkUnfurl(), slack.MsgOptionDisableMediaUnfurl()}
	if r.blocks != nil {
		opts = append(opts, slack.MsgOptionBlocks(r.blocks...))
	}
	return opts
}

// post calls chat.postMessage.
func (a *Adapter) post(ctx context.Context, channel, thread string, r rendered) (core.MessageRef, error) {
	key := a.limKey(channel)
	release, err := a.lim.Wait(ctx, key)
	if err != nil {
		return "", fmt.Errorf("slack: chat.postMessage: waiting for the rate limit: %w", err)
	}
	defer release()
	opts := msgOptions(r)
	if thread != "" {
		opts = append(opts, slack.MsgOptionTS(thread))
	}
	got, ts, err := a.api.PostMessageContext(ctx, channel, opts...)
	if err != nil {
		return "", a.outboundError(key, "chat.postMessage", err)
	}
	if got == "" {
		got = channel
	}
	if got != channel && key != got {
		// Posted under the user id's key: the DM channel was just used.
		a.learnDM(channel, got)
		a.lim.Pause(got, a.cfg.Limits.PerChannelInterval)
	}
	if !idRe.MatchString(got) || !tsRe.MatchString(ts) {
		return "", fmt.Errorf("slack: chat.postMessage: answer without a channel and ts")
	}
	if thread != "" {
		// A thread under the bot's own message needs no memory (Slack's
		// events name the parent's author); one it answered in does.
		a.joinThread(ctx, got, thread)
	}
	return ref(got, ts), nil
}

// outboundError maps err and, on a 429, pauses the channel for Retry-After.
func (a *Adapter) outboundError(channel, op string, err error) error {
	err = mapError(op, err)
	if d, ok := kit.RetryAfterOf(err); ok {
		a.lim.Pause(channel, d)
		a.log.Warn("slack: rate limited; pausing the channel", slog.String("method", op), slog.String("slack_channel", channel), slog.Duration("retry_after", d))
		return err
	}
	var perm *core.PermanentError
	switch {
	case errors.As(err, &perm):
		a.log.Warn("slack: request refused; not retrying", slog.String("method", op), slog.String("slack_channel", channel), slog.Any("err", err))
	case isAuthError(err):
		a.log.Error("slack: request refused for the token; retrying until it is fixed", slog.String("method", op), slog.Any("err", err))
	}
	return err
}

// Update implements core.Channel: chat.update in place; buttons are removed
// once the card no longer takes taps.
func (a *Adapter) Update(ctx context.Context, r core.MessageRef, m core.OutMessage) error {
	r = a.moved.Resolve(r)
	channel, ts, ok := parseRef(r)
	if !ok {
		return kit.Permanentf("slack: %q is not a Slack message reference", r)
	}
	if c, _, err := a.chatOf(m.Conversation); err == nil && (strings.HasPrefix(c, "U") || strings.HasPrefix(c, "W")) {
		// A direct conversation is keyed by the person; its messages live
		// in the DM channel. Learnt here too (after a restart the first
		// job may be an edit), so that posts to the person and edits in
		// the DM share one rate-limit budget.
		a.learnDM(c, channel)
	}
	var out rendered
	switch {
	case m.Card != nil:
		var err error
		if out, err = renderCard(m.Card); err != nil {
			return kit.Permanentf("slack: %w", err)
		}
	case strings.TrimSpace(m.Text) != "":
		text := m.Text
		if parts := kit.SplitText(text, MaxMessageLen-len(truncMark), escapedWidth); len(parts) > 1 {
			text = parts[0] + truncMark
		}
		out = rendered{text: escape(text), blocks: []slack.Block{}}
	default:
		return kit.Permanent(errors.New("slack: nothing to show (empty text and no card)"))
	}
	release, err := a.lim.Wait(ctx, channel)
	if err != nil {
		return fmt.Errorf("slack: chat.update: waiting for the rate limit: %w", err)
	}
	tier, err := a.updTier.Wait(ctx, "")
	if err != nil {
		release()
		return fmt.Errorf("slack: chat.update: waiting for the rate limit: %w", err)
	}
	_, _, _, err = a.api.UpdateMessageContext(ctx, channel, ts, msgOptions(out)...)
	tier()
	release()
	if err == nil {
		return nil
	}
	if code := slackErr(err); code == "message_not_found" || code == "cant_update_message" || code == "edit_window_closed" {
		a.log.Info("slack: the message to edit is gone; posting the new state as a new message", slog.String("ref", string(r)), slog.String("error", code))
		thread := ""
		if m.Conversation != "" {
			if _, th, err := a.chatOf(m.Conversation); err == nil {
				thread = th
			}
		}
		nr, err := a.post(ctx, channel, thread, out)
		if err != nil {
			return err
		}
		a.moved.Record(r, nr)
		return nil
	}
	return a.outboundError(channel, "chat.update", err)
}

// DeleteMessage implements core.MessageDeleter. With a bot token Slack lets
// the bot delete only its own messages: a person's message (for example
// one with a pasted token) answers cant_delete_message, which is logged and
// reported as a permanent error; the core has already redacted it from
// everything Silas keeps. A message that is already gone is not an error.
func (a *Adapter) DeleteMessage(ctx context.Context, conv core.ConversationID, platformMessageID string) error {
	channel, _, err := a.chatOf(conv)
	if err != nil {
		return err
	}
	ts := platformMessageID
	if c, rest, ok := strings.Cut(platformMessageID, ":"); ok && idRe.MatchString(c) {
		channel, ts = c, rest
	}
	if !tsRe.MatchString(ts) {
		return kit.Permanentf("slack: %q is not a message reference", platformMessageID)
	}
	release, err := a.lim.Wait(ctx, channel)
	if err != nil {
		return fmt.Errorf("slack: chat.delete: waiting for the rate limit: %w", err)
	}
	tier, err := a.updTier.Wait(ctx, "")
	if err != nil {
		release()
		return fmt.Errorf("slack: chat.delete: waiting for the rate limit: %w", err)
	}
	_, _, err = a.api.DeleteMessageContext(ctx, channel, ts)
	tier()
	release()
	if err == nil || slackErr(err) == "message_not_found" {
		return nil
	}
	if slackErr(err) == "cant_delete_message" {
		a.log.Warn("slack: cannot delete a person's message with a bot token; ask them to delete it (docs/slack.md)",
			slog.String("slack_channel", channel))
	}
	return a.outboundError(channel, "chat.delete", err)
}

// ephemeral shows text to the tapper only (chat.postEphemeral in the tapped
// message's channel and thread). When Slack refuses (the bot is not in the
// channel), the tap's response_url carries it instead, still ephemeral.
func (a *Adapter) ephemeral(ctx context.Context, h tapHandle, text string) error {
	if h.channel == "" || h.user == "" {
		return nil
	}
	release, err := a.lim.Wait(ctx, h.channel)
	if err != nil {
		return err
	}
	tier, err := a.ephTier.Wait(ctx, "")
	if err != nil {
		release()
		return err
	}
	opts := []slack.MsgOption{slack.MsgOptionText(escape(text), false)}
	if h.thread != "" {
		opts = append(opts, slack.MsgOptionTS(h.thread))
	}
	_, err = a.api.PostEphemeralContext(ctx, h.channel, h.user, opts...)
	tier()
	release()
	if err == nil {
		return nil
	}
	if d, ok := kit.RetryAfterOf(mapError("chat.postEphemeral", err)); ok {
		a.lim.Pause(h.channel, d)
	}
	if h.responseURL != "" {
		_, _, rerr := a.api.PostMessageContext(ctx, h.channel, slack.MsgOptionText(escape(text), false),
			slack.MsgOptionResponseURL(h.responseURL, slack.ResponseTypeEphemeral))
		if rerr == nil {
			return nil
		}
	}
	err = mapError("chat.postEphemeral", err)
	a.log.Warn("slack: could not answer a tap", slog.Any("err", err))
	return err
}
