package discord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/bwmarrin/discordgo"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core"
)

// Outbound: Send and Update. A core.MessageRef is "<channel id>:<message
// id>".
//
//   - A text longer than MaxMessageLen (after escaping) is split on line
//     boundaries; Send returns the first part's ref, and a retried Send
//     skips the parts already sent (kit.Splits).
//   - Text and card: the text (in parts) then the card; Send returns the
//     card's ref. A card is always one message (renderCard shortens it).
//   - Update edits the message in place — through a pending tap's
//     interaction response (type 7) when there is one, else with
//     PATCH /channels/{id}/messages/{id}. A message that is gone is sent
//     anew and later updates edit the new one.
//   - Everything carries allowed_mentions with no parse targets.

func (a *Adapter) channelOf(conv core.ConversationID) (string, error) {
	rest, ok := strings.CutPrefix(string(conv), string(a.cfg.Name)+":")
	if !ok || !snowflakeRe.MatchString(rest) {
		return "", kit.Permanentf("discord: conversation %q is not a %s conversation", conv, a.cfg.Name)
	}
	return rest, nil
}

// escapedWidth is the length of r once escaped (Discord counts code
// points).
func escapedWidth(r rune) int {
	if strings.ContainsRune(markdownSpecial, r) {
		return 2
	}
	return 1
}

// Send implements core.Channel.
func (a *Adapter) Send(ctx context.Context, m core.OutMessage) (core.MessageRef, error) {
	ch, err := a.channelOf(m.Conversation)
	if err != nil {
		return "", err
	}
	var msgs []rendered
	for _, p := range kit.TextParts(m.Text, MaxMessageLen, escapedWidth) {
		msgs = append(msgs, rendered{content: escapeMarkdown(p)})
	}
	textParts := len(msgs)
	if m.Card != nil {
		r, err := renderCard(m.Card)
		if err != nil {
			return "", kit.Permanentf("discord: %w", err)
		}
		msgs = append(msgs, r)
	}
	return kit.SendParts(a.splits, m, msgs, textParts, "discord", func(_ int, r rendered) (core.MessageRef, error) {
		return a.sendRendered(ctx, ch, r)
	})
}

func (a *Adapter) sendRendered(ctx context.Context, ch string, r rendered) (core.MessageRef, error) {
	release, err := a.lim.Wait(ctx, ch)
	if err != nil {
		return "", fmt.Errorf("discord: send: waiting for the rate limit: %w", err)
	}
	defer release()
	ms := &discordgo.MessageSend{Content: r.content, Embeds: r.embeds, Components: r.components, AllowedMentions: noMentions()}
	msg, err := a.rest.ChannelMessageSendComplex(ch, ms, discordgo.WithContext(ctx))
	if err != nil {
		return "", a.outboundError(ch, "create message", err)
	}
	if msg == nil || !snowflakeRe.MatchString(msg.ID) {
		return "", errors.New("discord: create message: answer without a message id")
	}
	ref := messageRef(ch, msg.ID)
	a.remember(ref, r)
	return ref, nil
}

func (a *Adapter) outboundError(ch, op string, err error) error {
	err = mapError(op, err)
	if d, ok := kit.RetryAfterOf(err); ok {
		a.lim.Pause(ch, d)
	}
	return err
}

// Update implements core.Channel.
func (a *Adapter) Update(ctx context.Context, ref core.MessageRef, m core.OutMessage) error {
	ref = a.moved.Resolve(ref)
	ch, id, ok := parseRef(ref)
	if !ok {
		return kit.Permanentf("discord: %q is not a Discord message reference", ref)
	}
	var out rendered
	switch {
	case m.Card != nil:
		var err error
		if out, err = renderCard(m.Card); err != nil {
			return kit.Permanentf("discord: %w", err)
		}
	case strings.TrimSpace(m.Text) != "":
		text := m.Text
		if parts := kit.SplitText(text, MaxMessageLen-len(truncMark), escapedWidth); len(parts) > 1 {
			text = parts[0]
		}
		out = rendered{content: escapeMarkdown(text)}
		if text != m.Text {
			out.content += truncMark
		}
		out.embeds, out.components = []*discordgo.MessageEmbed{}, []discordgo.MessageComponent{}
	default:
		return kit.Permanent(errors.New("discord: nothing to show (empty text and no card)"))
	}
	release, err := a.lim.Wait(ctx, ch)
	if err != nil {
		return fmt.Errorf("discord: edit: waiting for the rate limit: %w", err)
	}
	content := out.content
	embeds := out.embeds
	if embeds == nil {
		embeds = []*discordgo.MessageEmbed{}
	}
	comps := out.components
	if comps == nil {
		comps = []discordgo.MessageComponent{} // no buttons: remove them
	}
	_, err = a.rest.ChannelMessageEditComplex(&discordgo.MessageEdit{ID: id, Channel: ch, Content: &content, Embeds: &embeds,
		Components: &comps, AllowedMentions: noMentions()}, discordgo.WithContext(ctx))
	release()
	if err == nil {
		a.remember(ref, out)
		return nil
	}
	if c := apiCode(err); c == codeUnknownMessage {
		a.log.Info("discord: the message to edit is gone; sending the new state as a new message", slog.String("ref", string(ref)))
		nr, err := a.sendRendered(ctx, ch, out)
		if err != nil {
			return err
		}
		a.moved.Record(ref, nr)
		return nil
	}
	return a.outboundError(ch, "edit message", err)
}

// DeleteMessage implements core.MessageDeleter: a user's message that
// contained a credential. In a guild this needs the Manage Messages
// permission; without it the message stays (logged) and the reply still
// asks the user to revoke the credential.
func (a *Adapter) DeleteMessage(ctx context.Context, conv core.ConversationID, platformMessageID string) error {
	ch, err := a.channelOf(conv)
	if err != nil {
		return err
	}
	if !snowflakeRe.MatchString(platformMessageID) {
		return kit.Permanentf("discord: %q is not a message id", platformMessageID)
	}
	err = a.rest.ChannelMessageDelete(ch, platformMessageID, discordgo.WithContext(ctx))
	switch c := apiCode(err); {
	case err == nil, c == codeUnknownMessage:
		return nil
	case c == codeMissingPerms || c == codeMissingAccess:
		return kit.Permanentf("discord: cannot delete the message: the bot lacks Manage Messages in this channel")
	}
	return mapError("delete message", err)
}
