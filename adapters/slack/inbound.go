package slack

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/commands/catalog"
	"github.com/silas-gateway/silas/internal/lazyre"
)

// Inbound conversion: one Slack event, interaction or slash command becomes
// at most one core.Turn. The adapter reports facts (who, where, what, how
// authenticated); it never decides trust. Channel messages that do not
// address the bot are not ours and are dropped here; direct messages are
// all delivered (the core applies the DM policy from Turn.ChatKind).
//
// Event ids (the core's idempotency key):
//   - a message or mention: "m:<channel>:<ts>". Slack sends a mention in a
//     channel twice, as a `message` and as an `app_mention` event with
//     different event_ids; keyed by the message they are one turn, and so
//     are Slack's retries of either;
//   - a button tap: "a:<trigger_id>";
//   - a slash command: "c:<trigger_id>".
//
// Turn.PlatformMessageID is "<channel id>:<ts>", what chat.delete needs.

// botInfo is who the bot is, learned with auth.test.
type botInfo struct {
	userID string // U… of the bot user
	botID  string // B…
	teamID string // T…: the one workspace this configuration serves
}

// action says what to do with a converted payload.
type action int

const (
	// actIgnore: not for Silas (the bot's own posts, edits, channel chatter).
	actIgnore action = iota
	// actDeliver: hand the turn to the core.
	actDeliver
	// actMalformed: the payload makes no sense; logged and dropped.
	actMalformed
	// actForeign: from another workspace; refused without an answer.
	actForeign
	// actUnknownButton: a tap whose value is not ours.
	actUnknownButton
)

func (a action) String() string {
	return [...]string{"ignore", "deliver", "malformed", "foreign", "unknown_button"}[a]
}

// tapHandle is what answering a tap needs.
type tapHandle struct {
	channel     string
	user        string
	thread      string // thread_ts of the tapped message, "" at top level
	messageTS   string // the tapped message ("" when Slack did not say)
	responseURL string
}

// tapHandleJSON is a tapHandle as core.Turn.TapHandle carries it.
type tapHandleJSON struct {
	Channel     string `json:"c"`
	User        string `json:"u"`
	Thread      string `json:"t,omitempty"`
	MessageTS   string `json:"m,omitempty"`
	ResponseURL string `json:"r,omitempty"`
}

func (h tapHandle) encode() string {
	b, _ := json.Marshal(tapHandleJSON{h.channel, h.user, h.thread, h.messageTS, h.responseURL})
	return string(b)
}

// decodeTapHandle reads what encode wrote, checked as inbound checks a
// tap (a stored turn is data, not code).
func decodeTapHandle(s string) (tapHandle, bool) {
	var j tapHandleJSON
	if json.Unmarshal([]byte(s), &j) != nil || !idRe.MatchString(j.Channel) || !idRe.MatchString(j.User) ||
		(j.Thread != "" && !tsRe.MatchString(j.Thread)) || (j.MessageTS != "" && !tsRe.MatchString(j.MessageTS)) ||
		(j.ResponseURL != "" && !okResponseURL(j.ResponseURL)) {
		return tapHandle{}, false
	}
	return tapHandle{channel: j.Channel, user: j.User, thread: j.Thread, messageTS: j.MessageTS, responseURL: j.ResponseURL}, true
}

// inbound is the result of converting one payload.
type inbound struct {
	act    action
	turn   core.Turn
	reason string
	tap    *tapHandle
	// thread is the conversation's thread ("" for none); mentions at the
	// top level of a channel are answered in a thread under the mention.
	thread string
}

// Conversation ids: "<name>:<channel>" or "<name>:<channel>:<thread ts>".
func conversation(ch core.ChannelName, channel, thread string) core.ConversationID {
	if thread == "" {
		return core.ConversationID(string(ch) + ":" + channel)
	}
	return core.ConversationID(string(ch) + ":" + channel + ":" + thread)
}

// convChannel is the channel part of a conversation id. A direct message
// is keyed by the person (slack:U…), not by the DM's channel id (D…): the
// core reaches an owner privately by identity (core.DirectMessenger) before
// it knows the DM's id, and a tap on that card must land in the same
// conversation. chat.postMessage to a user id posts in the app's DM with
// them; edits, deletes and ephemerals use the real channel id, which the
// message refs and taps carry.
func convChannel(kind, channel, user string) string {
	if kind == core.ChatDirect {
		return user
	}
	return channel
}

// identity builds "slack:<user id>".
func identity(user string) core.IdentityID { return core.IdentityID("slack:" + user) }

var (
	idRe = lazyre.New(`^[A-Z0-9]{2,40}$`)
	tsRe = lazyre.New(`^[0-9]{1,12}\.[0-9]{1,8}$`)
)

// eventsPayload is the Events API's outer envelope (HTTP body, or a Socket
// Mode events_api envelope's payload).
type eventsPayload struct {
	Type      string     `json:"type"`
	Challenge string     `json:"challenge"`
	TeamID    string     `json:"team_id"`
	EventID   string     `json:"event_id"`
	EventTime int64      `json:"event_time"`
	Event     innerEvent `json:"event"`
}

type innerEvent struct {
	Type         string `json:"type"`
	Subtype      string `json:"subtype"`
	User         string `json:"user"`
	BotID        string `json:"bot_id"`
	Text         string `json:"text"`
	TS           string `json:"ts"`
	ThreadTS     string `json:"thread_ts"`
	Channel      string `json:"channel"`
	ChannelType  string `json:"channel_type"`
	ParentUserID string `json:"parent_user_id"`
	Team         string `json:"team"`
}

// decodeEvents decodes an Events API payload.
func decodeEvents(raw []byte) (*eventsPayload, error) {
	var p eventsPayload
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("event payload is not JSON: %w", err)
	}
	return &p, nil
}

// threadKnown reports whether the bot posted in (or started) a thread.
type threadKnown func(channel, threadTS string) bool

// eventToTurn converts an Events API payload. It is pure apart from known
// and must never panic on any input (FuzzPayloads).
func eventToTurn(p *eventsPayload, me botInfo, ch core.ChannelName, method string, known threadKnown) inbound {
	if p == nil || p.Type != "event_callback" {
		return inbound{act: actIgnore, reason: "not an event callback"}
	}
	if me.teamID == "" || p.TeamID != me.teamID {
		return inbound{act: actForeign, reason: fmt.Sprintf("event from workspace %q", p.TeamID)}
	}
	e := p.Event
	switch {
	case e.Type != "message" && e.Type != "app_mention":
		return inbound{act: actIgnore, reason: fmt.Sprintf("event type %q not handled", e.Type)}
	case e.Subtype != "" && e.Subtype != "thread_broadcast":
		// message_changed (incl. our own edits), message_deleted,
		// bot_message, channel_join…: editing "run x" into "run y" must not
		// run anything again.
		return inbound{act: actIgnore, reason: "message subtype " + e.Subtype}
	case e.BotID != "" || (me.userID != "" && e.User == me.userID):
		return inbound{act: actIgnore, reason: "message from a bot"}
	case e.User == "":
		return inbound{act: actIgnore, reason: "message without a user"}
	case !idRe.MatchString(e.User) || !idRe.MatchString(e.Channel):
		return inbound{act: actMalformed, reason: "user or channel id malformed"}
	case !tsRe.MatchString(e.TS) || (e.ThreadTS != "" && !tsRe.MatchString(e.ThreadTS)):
		return inbound{act: actMalformed, reason: "ts malformed"}
	case e.Team != "" && me.teamID != "" && e.Team != me.teamID && !strings.HasPrefix(e.Team, "E"):
		// A user of another workspace in a shared channel: one workspace
		// per configuration.
		return inbound{act: actForeign, reason: fmt.Sprintf("user of workspace %q", e.Team)}
	case !utf8.ValidString(e.Text):
		return inbound{act: actMalformed, reason: "text is not valid UTF-8"}
	}
	kind := core.ChatGroup
	if e.ChannelType == "im" || (e.ChannelType == "" && strings.HasPrefix(e.Channel, "D")) {
		kind = core.ChatDirect
	}
	text, mentioned := normalizeText(e.Text, me.userID)
	thread := e.ThreadTS
	if kind == core.ChatGroup {
		addressed := mentioned || e.Type == "app_mention" ||
			(thread != "" && ((me.userID != "" && e.ParentUserID == me.userID) || (known != nil && known(e.Channel, thread))))
		if !addressed {
			return inbound{act: actIgnore, reason: "channel message not addressed to the bot"}
		}
		if thread == "" {
			thread = e.TS // answer a top-level mention in a thread under it
		}
	}
	if strings.TrimSpace(text) == "" {
		return inbound{act: actIgnore, reason: "nothing left after the mention"}
	}
	// The text fallback: "approve <id>" typed is the very Tap a button
	// sends, which the core validates like one (card, conversation,
	// approver, state). It belongs to the conversation where it was typed
	// (a card's thread, or the top level), not to a new thread under it,
	// and its answer is an ephemeral notice to the typist there.
	if tap, ok := kit.ParseTextTap(text, nil); ok {
		t := core.Turn{
			Channel: ch, Conversation: conversation(ch, convChannel(kind, e.Channel, e.User), e.ThreadTS), Sender: identity(e.User),
			EventID: "m:" + e.Channel + ":" + e.TS, ChatKind: kind, Tap: &tap,
			Evidence: core.Evidence{Authenticated: true, Method: method},
		}
		if p.EventTime > 0 {
			t.At = time.Unix(p.EventTime, 0).UTC()
		}
		return inbound{act: actDeliver, turn: t, tap: &tapHandle{channel: e.Channel, user: e.User, thread: e.ThreadTS}}
	}
	t := core.Turn{
		Channel: ch, Conversation: conversation(ch, convChannel(kind, e.Channel, e.User), thread), Sender: identity(e.User),
		EventID: "m:" + e.Channel + ":" + e.TS, PlatformMessageID: e.Channel + ":" + e.TS, ChatKind: kind, Text: catalog.Text(text),
		Evidence: core.Evidence{Authenticated: true, Method: method},
	}
	if p.EventTime > 0 {
		t.At = time.Unix(p.EventTime, 0).UTC()
	}
	if e.ThreadTS != "" && e.ThreadTS != e.TS && me.userID != "" && e.ParentUserID == me.userID {
		// A reply in the thread under the bot's own message — Slack's way
		// to reply to it: that message's ref as the outbox recorded it, in
		// the conversation it was posted in, so a flow's card takes it.
		t.ReplyTo, t.ReplyIn = ref(e.Channel, e.ThreadTS), conversation(ch, convChannel(kind, e.Channel, e.User), "")
	}
	return inbound{act: actDeliver, turn: t, thread: thread}
}

// slackRef matches Slack's angle-bracket references: <@U…>, <@U…|name>,
// <#C…|name>, <!here>, <http://…|label>.
var slackRef = lazyre.New(`<([^<>]*)>`)

// normalizeText removes the bot's mention, turns Slack's references back
// into what the person typed and undoes Slack's escaping of & < >. It
// reports whether the bot was mentioned.
func normalizeText(s, botUser string) (string, bool) {
	mentioned := false
	s = slackRef.ReplaceAllStringFunc(s, func(m string) string {
		in := m[1 : len(m)-1]
		target, label, _ := strings.Cut(in, "|")
		switch {
		case strings.HasPrefix(target, "@"):
			if botUser != "" && target[1:] == botUser {
				mentioned = true
				return ""
			}
			if label != "" {
				return "@" + label
			}
			return target
		case strings.HasPrefix(target, "#"):
			if label != "" {
				return "#" + label
			}
			return target
		case strings.HasPrefix(target, "!"):
			if label != "" {
				return label
			}
			return "@" + strings.TrimPrefix(target, "!")
		}
		// A link Slack made of a URL the person typed: the URL itself.
		return target
	})
	s = strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&").Replace(s)
	return strings.Join(strings.Fields(strings.TrimSpace(s)), " "), mentioned
}

// Button values: "c:<card id>:<choice id>", also the action_id. Card ids
// are the core's ids (up to 40 of A-Z a-z 0-9 _ -), choice ids at most 16.
var (
	cardIDRe   = lazyre.New(`^[A-Za-z0-9_-]{1,40}$`)
	choiceIDRe = lazyre.New(`^[A-Za-z0-9_-]{1,16}$`)
)

// buttonValue encodes a choice.
func buttonValue(card, choice string) (string, error) {
	if !cardIDRe.MatchString(card) || !choiceIDRe.MatchString(choice) {
		return "", fmt.Errorf("card %q / choice %q cannot be carried in a Slack button", card, choice)
	}
	return "c:" + card + ":" + choice, nil
}

// parseButtonValue is the strict inverse of buttonValue.
func parseButtonValue(v string) (card, choice string, ok bool) {
	rest, found := strings.CutPrefix(v, "c:")
	if !found || len(v) > 64 {
		return "", "", false
	}
	card, choice, found = strings.Cut(rest, ":")
	if !found || !cardIDRe.MatchString(card) || !choiceIDRe.MatchString(choice) {
		return "", "", false
	}
	return card, choice, true
}

// decodeInteraction decodes an interaction payload (the JSON inside the
// form field "payload" in HTTP mode; the envelope payload in Socket Mode).
func decodeInteraction(raw []byte) (*slack.InteractionCallback, error) {
	var ic slack.InteractionCallback
	if err := json.Unmarshal(raw, &ic); err != nil {
		return nil, fmt.Errorf("interaction payload is not JSON: %w", err)
	}
	return &ic, nil
}

// interactionToTurn converts a block_actions interaction (a button tap).
// Pure; never panics (FuzzPayloads).
func interactionToTurn(ic *slack.InteractionCallback, me botInfo, ch core.ChannelName, method string) inbound {
	if ic == nil {
		return inbound{act: actMalformed, reason: "empty interaction"}
	}
	if me.teamID == "" || ic.Team.ID != me.teamID {
		return inbound{act: actForeign, reason: fmt.Sprintf("interaction from workspace %q", ic.Team.ID)}
	}
	if ic.Type != slack.InteractionTypeBlockActions {
		return inbound{act: actIgnore, reason: fmt.Sprintf("interaction type %q not handled", ic.Type)}
	}
	channel := ic.Channel.ID
	if channel == "" {
		channel = ic.Container.ChannelID
	}
	msgTS := ic.Container.MessageTs
	if msgTS == "" {
		msgTS = ic.Message.Timestamp
	}
	thread := ic.Container.ThreadTs
	if thread == "" {
		thread = ic.Message.ThreadTimestamp
	}
	if thread == msgTS && thread != "" && ic.Message.ThreadTimestamp == "" {
		thread = ""
	}
	h := &tapHandle{channel: channel, user: ic.User.ID, thread: thread, messageTS: msgTS, responseURL: ic.ResponseURL}
	unknown := func(reason string) inbound { return inbound{act: actUnknownButton, reason: reason, tap: h} }
	switch {
	case !idRe.MatchString(ic.User.ID) || !idRe.MatchString(channel):
		return inbound{act: actMalformed, reason: "tap without a user or channel"}
	case msgTS != "" && !tsRe.MatchString(msgTS), thread != "" && !tsRe.MatchString(thread):
		return inbound{act: actMalformed, reason: "ts malformed"}
	}
	// slack-go files an action without block_id under AttachmentActions;
	// Slack always sends one, but a proxy or fake may not.
	var value, actionTS string
	switch ba, aa := ic.ActionCallback.BlockActions, ic.ActionCallback.AttachmentActions; {
	case len(ba) == 1 && len(aa) == 0 && ba[0] != nil:
		value, actionTS = ba[0].Value, ba[0].ActionTs
	case len(ba) == 0 && len(aa) == 1 && aa[0] != nil:
		value = aa[0].Value
	default:
		return unknown("not exactly one action")
	}
	if ic.ResponseURL != "" && !okResponseURL(ic.ResponseURL) {
		h.responseURL = ""
	}
	card, choice, ok := parseButtonValue(value)
	if !ok {
		return unknown("button value is not a Silas button")
	}
	ev := ic.TriggerID
	if ev == "" || len(ev) > 150 {
		ev = channel + ":" + msgTS + ":" + ic.User.ID + ":" + actionTS
	}
	kind := core.ChatGroup
	if strings.HasPrefix(channel, "D") {
		kind = core.ChatDirect
	}
	t := core.Turn{
		Channel: ch, Conversation: conversation(ch, convChannel(kind, channel, ic.User.ID), thread), Sender: identity(ic.User.ID),
		SenderName: displayName(ic.User.Name), EventID: "a:" + ev, ChatKind: kind,
		Tap: &core.Tap{Card: cardsID(card), Choice: choice}, Evidence: core.Evidence{Authenticated: true, Method: method},
	}
	return inbound{act: actDeliver, turn: t, tap: h, thread: thread}
}

// okResponseURL keeps response_url to an https (or, for tests, http) URL.
func okResponseURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != ""
}

func displayName(s string) string {
	if utf8.RuneCountInString(s) > 64 {
		s = string([]rune(s)[:64])
	}
	return strings.ToValidUTF8(s, "�")
}

// command is a slash command's fields (form fields over HTTP, a JSON object
// in Socket Mode).
type command struct {
	TeamID      string `json:"team_id"`
	ChannelID   string `json:"channel_id"`
	ChannelName string `json:"channel_name"`
	UserID      string `json:"user_id"`
	UserName    string `json:"user_name"`
	Command     string `json:"command"`
	Text        string `json:"text"`
	TriggerID   string `json:"trigger_id"`
	ResponseURL string `json:"response_url"`
}

func commandFromForm(v url.Values) *command {
	return &command{TeamID: v.Get("team_id"), ChannelID: v.Get("channel_id"), ChannelName: v.Get("channel_name"),
		UserID: v.Get("user_id"), UserName: v.Get("user_name"), Command: v.Get("command"), Text: v.Get("text"),
		TriggerID: v.Get("trigger_id"), ResponseURL: v.Get("response_url")}
}

// commandToTurn converts "/silas run uname -a". Pure; never panics.
func commandToTurn(c *command, me botInfo, ch core.ChannelName, method string) inbound {
	switch {
	case c == nil:
		return inbound{act: actMalformed, reason: "empty command"}
	case me.teamID == "" || c.TeamID != me.teamID:
		return inbound{act: actForeign, reason: fmt.Sprintf("command from workspace %q", c.TeamID)}
	case !idRe.MatchString(c.UserID) || !idRe.MatchString(c.ChannelID):
		return inbound{act: actMalformed, reason: "command without a user or channel"}
	case c.TriggerID == "" || len(c.TriggerID) > 150:
		return inbound{act: actMalformed, reason: "command without a trigger_id"}
	case !utf8.ValidString(c.Text):
		return inbound{act: actMalformed, reason: "text is not valid UTF-8"}
	}
	// "/silas stop" is a command by the platform's word: its first word is
	// read through the one command catalog whatever follows.
	text, _ := normalizeText(c.Text, me.userID)
	text = catalog.Named(text)
	kind := core.ChatGroup
	if strings.HasPrefix(c.ChannelID, "D") || c.ChannelName == "directmessage" {
		kind = core.ChatDirect
	}
	t := core.Turn{
		Channel: ch, Conversation: conversation(ch, convChannel(kind, c.ChannelID, c.UserID), ""), Sender: identity(c.UserID),
		SenderName: displayName(c.UserName), EventID: "c:" + c.TriggerID, ChatKind: kind, Text: text,
		Evidence: core.Evidence{Authenticated: true, Method: method},
	}
	return inbound{act: actDeliver, turn: t}
}
