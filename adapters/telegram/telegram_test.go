package telegram

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/telegram/telegramtest"
	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

func approvalCard() *cards.Card {
	return &cards.Card{
		ID: cards.ID(core.NewID()), Kind: cards.KindApproval, Intent: "Run a command", Risk: cards.RiskLow,
		Rationale: "You asked for it.", Command: "uname -a", Status: cards.StatusPending, ExpiresAt: "2030-01-01T00:00:00Z",
		Choices: []cards.Choice{
			{ID: "approve", Label: "Run `uname -a`", Style: cards.StylePrimary},
			{ID: "later", Label: "Remind me later", Style: cards.StyleSecondary},
			{ID: "decline", Label: "Decline", Style: cards.StyleDanger},
		},
	}
}

func msgIDOf(t *testing.T, r core.MessageRef) int {
	t.Helper()
	_, id, ok := parseRef(r)
	if !ok {
		t.Fatalf("ref %q is malformed", r)
	}
	return id
}

func TestOwnerRunTurnIsDelivered(t *testing.T) {
	b := setup(t, telegramtest.Options{}, nil)
	b.start(t)
	id := b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "/run uname -a"})
	got := b.waitTurn(t, id)
	want := core.Turn{
		Channel: "telegram", Conversation: "telegram:1001", Sender: "telegram:1001", SenderName: "Olive Owner",
		EventID: fmt.Sprintf("u%d", id), ChatKind: core.ChatDirect, Text: "/run uname -a",
		Evidence: core.Evidence{Authenticated: true, Method: "telegram-polling"},
	}
	if got.At.IsZero() {
		t.Errorf("At is zero")
	}
	got.At = time.Time{}
	if got.PlatformMessageID == "" {
		t.Errorf("PlatformMessageID is empty")
	}
	got.PlatformMessageID = ""
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Fatalf("turn =\n%+v\nwant\n%+v", got, want)
	}
	// The offset moved past it, durably.
	waitFor(t, "stored offset", func() bool { return b.st.get("offset") == strconv.FormatInt(id, 10) })
}

func TestGroupGating(t *testing.T) {
	b := setup(t, telegramtest.Options{}, nil)
	bot := telegramtest.User{ID: b.srv.BotID, IsBot: true, FirstName: "Silas", Username: b.srv.BotUsername}
	other := telegramtest.User{ID: 777, IsBot: true, FirstName: "Other", Username: "other_bot"}
	// A message of the bot in the group, to reply to.
	ref, err := b.a.Send(context.Background(), core.OutMessage{Conversation: conversation("telegram", group.ID), Text: "hello group"})
	if err != nil {
		t.Fatal(err)
	}
	botMsg := msgIDOf(t, ref)
	tests := []struct {
		name string
		msg  telegramtest.Msg
		want string // delivered text; "" = not delivered
	}{
		{"plain chatter", telegramtest.Msg{Text: "lunch anyone?"}, ""},
		{"command without bot name", telegramtest.Msg{Text: "/run uname -a"}, ""},
		{"command for another bot", telegramtest.Msg{Text: "/run@other_bot uname -a"}, ""},
		{"command for another bot mentioning us", telegramtest.Msg{Text: "/run@other_bot uname @silas_test_bot"}, ""},
		{"mention of someone else", telegramtest.Msg{Text: "@olive_owner can you check?"}, ""},
		{"bot name inside a word is no mention", telegramtest.Msg{Text: "mail x@silas_test_bot please"}, ""},
		{"reply to someone else", telegramtest.Msg{Text: "/run ls", ReplyTo: 999, ReplyToUser: &owner}, ""},
		{"reply to another bot", telegramtest.Msg{Text: "/run ls", ReplyTo: 998, ReplyToUser: &other}, ""},
		{"from a bot", telegramtest.Msg{From: other, Text: "@silas_test_bot /run ls"}, ""},
		{"anonymous admin", telegramtest.Msg{Text: "@silas_test_bot /run ls", SenderChat: &group}, ""},
		{"edited message", telegramtest.Msg{Text: "@silas_test_bot /run ls", Edited: true}, ""},
		{"command with our name", telegramtest.Msg{Text: "/run@silas_test_bot uname -a"}, "/run uname -a"},
		{"command with our name, other case", telegramtest.Msg{Text: "/Pair@Silas_Test_Bot ABCDE-FGHJK"}, "/Pair ABCDE-FGHJK"},
		{"mention first", telegramtest.Msg{Text: "@silas_test_bot /run uname -a"}, "/run uname -a"},
		{"mention in the middle", telegramtest.Msg{Text: "hey @silas_test_bot run the backup"}, "hey run the backup"},
		{"mention last", telegramtest.Msg{Text: "/whoami @silas_test_bot"}, "/whoami"},
		{"text mention", telegramtest.Msg{Text: "Silas /help", Entities: []telegramtest.Entity{{Type: "text_mention", Offset: 0, Length: 5, User: &bot}}}, "/help"},
		{"reply to the bot", telegramtest.Msg{Text: "/run ls -l", ReplyTo: botMsg}, "/run ls -l"},
		{"mention after emoji (UTF-16 offsets)", telegramtest.Msg{Text: "🚀 @silas_test_bot /pending"}, "🚀 /pending"},
		{"only a mention", telegramtest.Msg{Text: "@silas_test_bot"}, ""},
	}
	ids := make([]int64, len(tests))
	for i, tt := range tests {
		m := tt.msg
		m.Chat = group
		if m.From.ID == 0 {
			m.From = owner
		}
		ids[i] = b.srv.SendMessage(m)
	}
	// A direct message last: once it arrives, every group message before it
	// was handled (polling delivers in order).
	sentinel := b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "@silas_test_bot /help"})
	b.start(t)
	if got := b.waitTurn(t, sentinel); got.Text != "/help" || got.ChatKind != core.ChatDirect {
		t.Errorf("direct message = %q (%s), want the mention stripped too", got.Text, got.ChatKind)
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := b.in.find(eventID(ids[i]))
			switch {
			case tt.want == "" && ok:
				t.Fatalf("delivered %q; it was not addressed to the bot", got.Text)
			case tt.want != "" && !ok:
				t.Fatalf("not delivered; want %q", tt.want)
			case ok && (got.Text != tt.want || got.ChatKind != core.ChatGroup || got.Conversation != conversation("telegram", group.ID) || got.Sender != "telegram:1001"):
				t.Fatalf("turn = %q %s %s %s; want %q in the group from telegram:1001", got.Text, got.ChatKind, got.Conversation, got.Sender, tt.want)
			}
		})
	}
}

func TestUsernameLearnedWithGetMe(t *testing.T) {
	b := setup(t, telegramtest.Options{BotUsername: "Learned_Bot"}, func(c *Config) { c.BotUsername = "" })
	b.start(t)
	id := b.srv.SendMessage(telegramtest.Msg{Chat: group, From: owner, Text: "/run@learned_bot date"})
	if got := b.waitTurn(t, id); got.Text != "/run date" {
		t.Fatalf("text = %q", got.Text)
	}
	if len(b.srv.Calls("getMe")) == 0 {
		t.Fatal("getMe was not called")
	}
}

func TestSendApprovalCardAsInlineKeyboard(t *testing.T) {
	b := setup(t, telegramtest.Options{}, nil)
	c := approvalCard()
	r, err := b.a.Send(context.Background(), core.OutMessage{Conversation: "telegram:1001", Card: c})
	if err != nil {
		t.Fatal(err)
	}
	m, ok := b.srv.Message(1001, msgIDOf(t, r))
	if !ok {
		t.Fatalf("ref %q names no message", r)
	}
	var labels []string
	for _, row := range m.Keyboard {
		for _, btn := range row {
			labels = append(labels, btn.Text)
			if len(btn.CallbackData) > MaxCallbackData {
				t.Errorf("callback_data %q is %d bytes", btn.CallbackData, len(btn.CallbackData))
			}
			if card, choice, ok := parseCallbackData(btn.CallbackData); !ok || card != c.ID {
				t.Errorf("callback_data %q does not decode to card %s (%q)", btn.CallbackData, c.ID, choice)
			}
		}
	}
	if got := strings.Join(labels, "|"); got != "Run `uname -a`|Remind me later|Decline" {
		t.Errorf("buttons = %s; want the card's order, recommended first and decline last", got)
	}
	for _, want := range []string{"Run a command", "Risk: low", "You asked for it.", "uname -a"} {
		if !strings.Contains(m.Text, want) {
			t.Errorf("card text lacks %q:\n%s", want, m.Text)
		}
	}
	// The widest ids a card may have still fit in 64 bytes.
	d, err := callbackData(cards.ID(strings.Repeat("z", 26)), strings.Repeat("x", cards.MaxChoiceID))
	if err != nil || len(d) > MaxCallbackData {
		t.Errorf("callback data %q (%d bytes): %v", d, len(d), err)
	}
}

func TestTapBecomesTurnAndIsAnswered(t *testing.T) {
	b := setup(t, telegramtest.Options{}, nil)
	b.start(t)
	c := approvalCard()
	r, err := b.a.Send(context.Background(), core.OutMessage{Conversation: "telegram:1001", Card: c})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := b.srv.Message(1001, msgIDOf(t, r))
	uid, qid := b.srv.Tap(telegramtest.Private(owner), owner, m.ID, m.Keyboard[0][0].CallbackData)
	got := b.waitTurn(t, uid)
	if got.Tap == nil || got.Tap.Card != c.ID || got.Tap.Choice != "approve" || got.Text != "" {
		t.Fatalf("turn = %+v; want a tap on %s/approve", got, c.ID)
	}
	if got.Sender != "telegram:1001" || got.Conversation != "telegram:1001" || got.ChatKind != core.ChatDirect || got.EventID != eventID(uid) {
		t.Fatalf("turn = %+v", got)
	}
	if got.TapHandle != qid {
		t.Fatalf("tap handle %q; want the callback query %q", got.TapHandle, qid)
	}
	if err := b.a.AnswerTap(context.Background(), answerOf(got, "Approved: running it now.")); err != nil {
		t.Fatal(err)
	}
	ans := b.srv.Answers()
	if len(ans) != 1 || ans[0].QueryID != qid || ans[0].Text != "Approved: running it now." {
		t.Fatalf("answers = %+v", ans)
	}
	// A second answer (the lane retrying) changes nothing, quietly.
	if err := b.a.AnswerTap(context.Background(), answerOf(got, "again")); err != nil {
		t.Fatal(err)
	}
	if len(b.srv.Answers()) != 1 {
		t.Fatalf("answered twice: %+v", b.srv.Answers())
	}
	// Taps in a group come from the tapper, in the group's conversation.
	gr, err := b.a.Send(context.Background(), core.OutMessage{Conversation: conversation("telegram", group.ID), Card: c})
	if err != nil {
		t.Fatal(err)
	}
	gm, _ := b.srv.Message(group.ID, msgIDOf(t, gr))
	uid, _ = b.srv.Tap(group, stranger, gm.ID, gm.Keyboard[2][0].CallbackData)
	got = b.waitTurn(t, uid)
	if got.Sender != "telegram:2002" || got.ChatKind != core.ChatGroup || got.Tap.Choice != "decline" {
		t.Fatalf("group tap turn = %+v", got)
	}
}

// A tap's handle is all an answer needs: a new adapter (the gateway
// restarted between the tap and its answer) answers it as well.
func TestTapIsAnsweredAfterARestart(t *testing.T) {
	b := setup(t, telegramtest.Options{}, nil)
	b.start(t)
	uid, qid := b.srv.Tap(telegramtest.Private(owner), owner, 1, "c:"+core.NewID()+":approve")
	got := b.waitTurn(t, uid)
	again, err := New(b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := again.AnswerTap(context.Background(), answerOf(got, "Unknown card: nothing was changed.")); err != nil {
		t.Fatal(err)
	}
	if a := b.srv.Answers(); len(a) != 1 || a[0].QueryID != qid || a[0].Text != "Unknown card: nothing was changed." {
		t.Fatalf("answers = %+v; want the one answer", a)
	}
}

// answerOf is the core's answer to tap turn t with notice text.
func answerOf(t core.Turn, text string) core.TapAnswer {
	return core.TapAnswer{Conversation: t.Conversation, EventID: t.EventID, Sender: t.Sender, Tap: *t.Tap, Handle: t.TapHandle, Text: text}
}

func TestUnknownButtonsAreRefused(t *testing.T) {
	b := setup(t, telegramtest.Options{}, nil)
	b.start(t)
	id := core.NewID()
	bad := []string{
		"", "c:", "c:" + id, "c:" + id + ":", "x:" + id + ":approve", "c::approve", "c:" + id + ":approve:extra",
		"c:" + id + ":appr ove", "c:../../etc:approve", "c:" + id + ":" + strings.Repeat("a", 17),
		"c:" + strings.Repeat("a", 41) + ":ok", "c:" + id + ":<b>x</b>", "approve " + id,
	}
	var qids []string
	for _, d := range bad {
		_, q := b.srv.Tap(telegramtest.Private(owner), owner, 1, d)
		qids = append(qids, q)
	}
	sentinel := b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "/help"})
	b.waitTurn(t, sentinel)
	waitFor(t, "answers", func() bool { return len(b.srv.Answers()) == len(bad) })
	for i, a := range b.srv.Answers() {
		if a.QueryID != qids[i] || a.Text != "Unknown button" {
			t.Errorf("answer %d = %+v; want %q for data %q", i, a, "Unknown button", bad[i])
		}
	}
	if n := b.in.count(); n != 1 {
		t.Fatalf("%d turns delivered; only the sentinel should be: %+v", n, b.in.list())
	}
}

func TestUpdateEditsInPlace(t *testing.T) {
	b := setup(t, telegramtest.Options{NoRateLimits: true}, func(c *Config) { c.Limits.PerChatInterval = time.Millisecond })
	ctx := context.Background()
	c := approvalCard()
	r, err := b.a.Send(ctx, core.OutMessage{Conversation: "telegram:1001", Card: c})
	if err != nil {
		t.Fatal(err)
	}
	// Medium risk: confirm step, buttons stay.
	c.Status = cards.StatusConfirming
	c.Choices = []cards.Choice{{ID: "confirm", Label: "Confirm: run it"}, {ID: "decline", Label: "Decline"}}
	if err := b.a.Update(ctx, r, core.OutMessage{Conversation: "telegram:1001", Card: c}); err != nil {
		t.Fatal(err)
	}
	m, _ := b.srv.Message(1001, msgIDOf(t, r))
	if len(m.Keyboard) != 2 || m.Keyboard[0][0].Text != "Confirm: run it" || !strings.Contains(m.Text, "Waiting for confirmation") {
		t.Fatalf("confirming card = %q %+v", m.Text, m.Keyboard)
	}
	// Decided: same message, new text, no buttons.
	c.Status, c.Outcome, c.Output = cards.StatusDone, "exit code 0 ✓", "Linux silas 6.1"
	if err := b.a.Update(ctx, r, core.OutMessage{Conversation: "telegram:1001", Card: c}); err != nil {
		t.Fatal(err)
	}
	msgs := b.srv.Messages(1001)
	if len(msgs) != 1 {
		t.Fatalf("%d messages; Update must edit, not send", len(msgs))
	}
	m = msgs[0]
	if m.Edits != 2 || len(m.Keyboard) != 0 || !strings.Contains(m.Text, "Done") || !strings.Contains(m.Text, "exit code 0 ✓") || !strings.Contains(m.Text, "Linux silas 6.1") {
		t.Fatalf("done card = %q keyboard %+v edits %d", m.Text, m.Keyboard, m.Edits)
	}
	// The same content again: Telegram says "message is not modified"; that
	// is not an error.
	before := len(b.srv.Calls("editMessageText"))
	if err := b.a.Update(ctx, r, core.OutMessage{Conversation: "telegram:1001", Card: c}); err != nil {
		t.Fatalf("identical update: %v", err)
	}
	if len(b.srv.Calls("editMessageText")) != before+1 {
		t.Fatal("identical update did not reach Telegram")
	}
}

func TestUpdateOfDeletedMessageSendsAnew(t *testing.T) {
	b := setup(t, telegramtest.Options{NoRateLimits: true}, func(c *Config) { c.Limits.PerChatInterval = time.Millisecond })
	ctx := context.Background()
	c := approvalCard()
	r, err := b.a.Send(ctx, core.OutMessage{Conversation: "telegram:1001", Card: c})
	if err != nil {
		t.Fatal(err)
	}
	b.srv.DeleteMessage(1001, msgIDOf(t, r))
	c.Status = cards.StatusApproved
	if err := b.a.Update(ctx, r, core.OutMessage{Conversation: "telegram:1001", Card: c}); err != nil {
		t.Fatal(err)
	}
	c.Status, c.Outcome = cards.StatusDone, "ok"
	if err := b.a.Update(ctx, r, core.OutMessage{Conversation: "telegram:1001", Card: c}); err != nil {
		t.Fatal(err)
	}
	msgs := b.srv.Messages(1001)
	if len(msgs) != 2 || !msgs[0].Deleted || msgs[1].Edits != 1 || !strings.Contains(msgs[1].Text, "Done") {
		t.Fatalf("messages = %+v; want the state re-sent once, then edited", msgs)
	}
}

func TestSecureInputLink(t *testing.T) {
	b := setup(t, telegramtest.Options{NoRateLimits: true}, nil)
	ctx := context.Background()
	c := &cards.Card{ID: cards.ID(core.NewID()), Kind: cards.KindSecureInput, Intent: "Enter the API key for backups",
		Link: &cards.Link{Label: "Open the secure form", URL: "https://silas.example.com/secure/abc"}, Status: cards.StatusPending}
	r, err := b.a.Send(ctx, core.OutMessage{Conversation: "telegram:1001", Card: c})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := b.srv.Message(1001, msgIDOf(t, r))
	if len(m.Keyboard) != 1 || m.Keyboard[0][0].URL != c.Link.URL || m.Keyboard[0][0].CallbackData != "" || m.Keyboard[0][0].Text != "Open the secure form" {
		t.Fatalf("keyboard = %+v; want one URL button", m.Keyboard)
	}
	// Telegram refuses local URLs in buttons: shown as text instead.
	c2 := *c
	c2.ID = cards.ID(core.NewID())
	c2.Link = &cards.Link{Label: "Open the secure form", URL: "http://127.0.0.1:8080/secure/abc"}
	r, err = b.a.Send(ctx, core.OutMessage{Conversation: "telegram:2002", Card: &c2})
	if err != nil {
		t.Fatal(err)
	}
	m, _ = b.srv.Message(2002, msgIDOf(t, r))
	if len(m.Keyboard) != 0 || !strings.Contains(m.Text, "http://127.0.0.1:8080/secure/abc") {
		t.Fatalf("local link card = %q %+v", m.Text, m.Keyboard)
	}
}

func TestFormattingInjectionIsShownLiterally(t *testing.T) {
	b := setup(t, telegramtest.Options{NoRateLimits: true}, func(c *Config) { c.Limits.PerChatInterval = time.Millisecond })
	b.start(t)
	ctx := context.Background()
	evil := `echo "<b>x</b>" <a href="https://evil.example/">click</a> &amp; <i>`
	c := approvalCard()
	c.Command, c.Intent, c.Rationale = evil, "Run "+evil, "Because <a href='x'>"
	c.AffectedItems = []string{"<pre>"}
	c.Details = "</blockquote><a href=\"https://evil.example/\">"
	c.Status, c.Output, c.Outcome, c.OutputRef = cards.StatusDone, evil+"\n&lt;script&gt;", "<u>ok</u>", "ref<&>"
	c.Choices = nil
	r1, err := b.a.Send(ctx, core.OutMessage{Conversation: "telegram:1001", Card: c})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.a.Send(ctx, core.OutMessage{Conversation: "telegram:1001", Text: "Output: " + evil})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []core.MessageRef{r1, r2} {
		m, _ := b.srv.Message(1001, msgIDOf(t, r))
		if !strings.Contains(m.Text, evil) {
			t.Errorf("message does not show the text literally:\n%s", m.Text)
		}
		for _, tag := range m.Tags {
			if tag.Name == "a" || tag.Name == "u" {
				t.Errorf("user text produced a <%s> element (href %q)", tag.Name, tag.Href)
			}
		}
	}
	m, _ := b.srv.Message(1001, msgIDOf(t, r1))
	for _, lit := range []string{"&lt;script&gt;", "<u>ok</u>", "ref<&>", "Because <a href='x'>", "</blockquote><a href="} {
		if !strings.Contains(m.Text, lit) {
			t.Errorf("card text lacks the literal %q:\n%s", lit, m.Text)
		}
	}
	// Inbound, the user's text reaches the core verbatim.
	id := b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "/run " + evil})
	if got := b.waitTurn(t, id); got.Text != "/run "+evil {
		t.Fatalf("text = %q", got.Text)
	}
}

func TestLongTextIsSplitOnLines(t *testing.T) {
	b := setup(t, telegramtest.Options{NoRateLimits: true}, func(c *Config) { c.Limits.PerChatInterval = time.Millisecond })
	ctx := context.Background()
	var lines []string
	for i := 0; len(strings.Join(lines, "\n")) < 10000; i++ {
		lines = append(lines, fmt.Sprintf("line %04d: %s", i, strings.Repeat("<&>", i%20)))
	}
	cases := map[int64]string{
		1001: strings.Join(lines, "\n"),
		2002: strings.Repeat("word ", 2000),           // one long line
		3003: strings.Repeat("&", 5000),               // escaping quintuples it
		4004: strings.Repeat("𝄞", 3000) + "\nthe end", // surrogate pairs count twice
	}
	for chat, text := range cases {
		r, err := b.a.Send(ctx, core.OutMessage{Conversation: conversation("telegram", chat), Text: text})
		if err != nil {
			t.Fatalf("chat %d: %v", chat, err)
		}
		msgs := b.srv.Messages(chat)
		if len(msgs) < 2 {
			t.Fatalf("chat %d: %d message(s); want a split", chat, len(msgs))
		}
		var joined strings.Builder
		for _, m := range msgs {
			joined.WriteString(m.Text)
		}
		if joined.String() != text {
			t.Errorf("chat %d: the parts do not add up to the text", chat)
		}
		if msgIDOf(t, r) != msgs[0].ID {
			t.Errorf("chat %d: ref %s; want the first part %d", chat, r, msgs[0].ID)
		}
	}
	// Lines are kept whole when they fit.
	for _, m := range b.srv.Messages(1001) {
		if !strings.HasPrefix(m.Text, "line ") {
			t.Errorf("a part starts mid-line: %.30q", m.Text)
		}
	}
}

func TestLongTextRetryDoesNotRepeatParts(t *testing.T) {
	b := setup(t, telegramtest.Options{NoRateLimits: true}, func(c *Config) { c.Limits.PerChatInterval = time.Millisecond })
	ctx := context.Background()
	text := strings.Repeat(strings.Repeat("x", 99)+"\n", 100) // 10,000 characters: 3 parts
	b.srv.Inject("sendMessage", telegramtest.Fault{After: 1, Status: 502, Description: "Bad Gateway"})
	m := core.OutMessage{Conversation: "telegram:1001", Text: text}
	if _, err := b.a.Send(ctx, m); err == nil {
		t.Fatal("Send succeeded through a 502")
	}
	r, err := b.a.Send(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	msgs := b.srv.Messages(1001)
	if len(msgs) != 3 || msgIDOf(t, r) != msgs[0].ID {
		t.Fatalf("%d messages, ref %s; want 3 parts, none repeated, ref of the first", len(msgs), r)
	}
}

func TestLongOutputCardFitsOneMessage(t *testing.T) {
	b := setup(t, telegramtest.Options{NoRateLimits: true}, func(c *Config) { c.Limits.PerChatInterval = time.Millisecond })
	ctx := context.Background()
	c := approvalCard()
	c.Status, c.Outcome = cards.StatusDone, "exit code 0 ✓"
	c.Output = strings.Repeat("output line with <tags> & stuff\n", 400)
	c.OutputRef = "out_" + core.NewID()
	r, err := b.a.Send(ctx, core.OutMessage{Conversation: "telegram:1001", Card: c})
	if err != nil {
		t.Fatal(err)
	}
	msgs := b.srv.Messages(1001)
	if len(msgs) != 1 {
		t.Fatalf("%d messages; a card is one message", len(msgs))
	}
	m := msgs[0]
	if msgIDOf(t, r) != m.ID || !strings.Contains(m.Text, truncMark) || !strings.Contains(m.Text, "Full output stored as "+c.OutputRef) || !strings.Contains(m.Text, "output line with <tags> & stuff") {
		t.Fatalf("card = %q", m.Text)
	}
	// An open card whose command cannot be shown in full gets no buttons.
	c2 := approvalCard()
	c2.Command = "echo " + strings.Repeat("a", 5000)
	r, err = b.a.Send(ctx, core.OutMessage{Conversation: "telegram:1001", Card: c2})
	if err != nil {
		t.Fatal(err)
	}
	m, _ = b.srv.Message(1001, msgIDOf(t, r))
	if len(m.Keyboard) != 0 || !strings.Contains(m.Text, "cannot be approved from Telegram") {
		t.Fatalf("huge command card: keyboard %+v text %.200q", m.Keyboard, m.Text)
	}
}

func TestRateLimitedErrorCarriesRetryAfter(t *testing.T) {
	// The limiter runs on a clock that moves only when it waits, so the
	// test reads how long it chose to wait instead of timing it.
	clk := &stepClock{now: time.Unix(1_700_000_000, 0)}
	b := setup(t, telegramtest.Options{NoRateLimits: true}, func(c *Config) {
		c.Limits.PerChatInterval = time.Millisecond
		c.LimitClock = clk
	})
	ctx := context.Background()
	// A storm: five 429s in a row, each reported with Telegram's retry_after.
	b.srv.Inject("sendMessage", telegramtest.Fault{Status: 429, RetryAfter: 7, Times: 3})
	b.srv.Inject("sendMessage", telegramtest.Fault{Status: 429, RetryAfter: 1, Times: 2})
	want := []time.Duration{7 * time.Second, 7 * time.Second, 7 * time.Second, time.Second, time.Second}
	for i, w := range want {
		_, err := b.a.Send(ctx, core.OutMessage{Conversation: conversation("telegram", int64(5000+i)), Text: "hi"})
		var rl *core.RateLimitedError
		if !errors.As(fmt.Errorf("outbox: %w", err), &rl) || rl.RetryAfter != w {
			t.Fatalf("send %d: err = %v; want *core.RateLimitedError with RetryAfter %s", i, err, w)
		}
	}
	if _, err := b.a.Send(ctx, core.OutMessage{Conversation: "telegram:1001", Text: "hi"}); err != nil {
		t.Fatalf("after the storm: %v", err)
	}
	// Edits too.
	b.srv.Inject("editMessageText", telegramtest.Fault{Status: 429, RetryAfter: 3})
	r, _ := b.a.Send(ctx, core.OutMessage{Conversation: "telegram:1002", Card: approvalCard()})
	c := approvalCard()
	c.Status = cards.StatusDeclined
	err := b.a.Update(ctx, r, core.OutMessage{Conversation: "telegram:1002", Card: c})
	var rl *core.RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfter != 3*time.Second {
		t.Fatalf("update: %v", err)
	}
	// The chat that got the 429 waits retry_after before its next message.
	before := clk.waited()
	if err := b.a.Update(ctx, r, core.OutMessage{Conversation: "telegram:1002", Card: c}); err != nil {
		t.Fatal(err)
	}
	if d := clk.waited() - before; d < 3*time.Second {
		t.Fatalf("next message to the chat after a wait of %s; want it held for retry_after (3s)", d)
	}
}

// stepClock is a kit.Clock whose time moves only when someone waits on it:
// After(d) moves it by d and fires at once. It is for sequential tests
// that check how long the limiter chose to wait.
type stepClock struct {
	mu    sync.Mutex
	now   time.Time
	total time.Duration
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > 0 {
		c.now = c.now.Add(d)
		c.total += d
	}
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

func (c *stepClock) waited() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

func TestErrorsAreClassified(t *testing.T) {
	b := setup(t, telegramtest.Options{NoRateLimits: true}, func(c *Config) {
		c.Limits.PerChatInterval = time.Millisecond
		c.HTTPTimeout = time.Second
	})
	ctx := context.Background()
	b.srv.FailChat(-100404, telegramtest.Fault{Status: 400, Description: "Bad Request: chat not found"})
	b.srv.FailChat(4003, telegramtest.Fault{Status: 403, Description: "Forbidden: bot was blocked by the user"})
	b.srv.FailChat(-100777, telegramtest.Fault{Status: 400, Description: "Bad Request: group chat was upgraded to a supergroup chat", RetryAfter: 0})
	tests := []struct {
		name  string
		chat  int64
		fault *telegramtest.Fault
		want  string // "permanent", "retry", "ratelimited"
	}{
		{"chat not found", -100404, nil, "permanent"},
		{"blocked by the user", 4003, nil, "permanent"},
		{"group upgraded", -100777, nil, "permanent"},
		{"server error", 1, &telegramtest.Fault{Status: 500, Description: "Internal Server Error"}, "retry"},
		{"bad gateway page", 2, &telegramtest.Fault{Status: 502, Raw: "<html>Bad Gateway</html>"}, "retry"},
		{"slow answer", 3, &telegramtest.Fault{Delay: 3 * time.Second}, "retry"},
		{"flood", 4, &telegramtest.Fault{Status: 429, RetryAfter: 12}, "ratelimited"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.fault != nil {
				b.srv.Inject("sendMessage", *tt.fault)
			}
			_, err := b.a.Send(ctx, core.OutMessage{Conversation: conversation("telegram", tt.chat), Text: "hello"})
			var perm *core.PermanentError
			var rl *core.RateLimitedError
			got := "retry"
			switch {
			case err == nil:
				t.Fatal("Send succeeded")
			case errors.As(err, &perm):
				got = "permanent"
			case errors.As(err, &rl):
				got = "ratelimited"
			}
			if got != tt.want {
				t.Fatalf("%v classified %s; want %s", err, got, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "telegram: ") && got != "permanent" && got != "ratelimited" {
				t.Errorf("error %q does not name the package", err)
			}
		})
	}
	// A bad conversation or card is permanent too.
	if _, err := b.a.Send(ctx, core.OutMessage{Conversation: "webchat:local", Text: "x"}); !errors.As(err, new(*core.PermanentError)) {
		t.Errorf("foreign conversation: %v", err)
	}
	if _, err := b.a.Send(ctx, core.OutMessage{Conversation: "telegram:1", Card: &cards.Card{ID: "x"}}); !errors.As(err, new(*core.PermanentError)) {
		t.Errorf("invalid card: %v", err)
	}
	if err := b.a.Update(ctx, "nonsense", core.OutMessage{Conversation: "telegram:1", Text: "x"}); !errors.As(err, new(*core.PermanentError)) {
		t.Errorf("bad ref: %v", err)
	}
}

func TestLimiterIsObservedByTelegram(t *testing.T) {
	// Real time, Telegram's real limits, enforced by the fake (a violation
	// would be answered 429 and listed).
	b := setup(t, telegramtest.Options{Limits: telegramtest.Limits{PerChat: time.Second}}, nil)
	ctx := context.Background()
	errc := make(chan error, 100)
	// Three messages to one chat, concurrently.
	for i := 0; i < 3; i++ {
		go func() {
			_, err := b.a.Send(ctx, core.OutMessage{Conversation: "telegram:1001", Text: fmt.Sprintf("burst %d", i)})
			errc <- err
		}()
	}
	// Seventy chats at once: at most 30 messages a second overall.
	for i := 0; i < 70; i++ {
		go func() {
			_, err := b.a.Send(ctx, core.OutMessage{Conversation: conversation("telegram", int64(10000+i)), Text: "fan-out"})
			errc <- err
		}()
	}
	for i := 0; i < 73; i++ {
		if err := <-errc; err != nil {
			t.Errorf("send: %v", err)
		}
	}
	if v := b.srv.Violations(); len(v) > 0 {
		t.Fatalf("rate limits violated: %v", v)
	}
	// The fake enforces Telegram's limits as Telegram does (one message a
	// second per chat, 30 a second overall) and lists every message that
	// broke one: no violation is the proof the limiter held them back, with
	// no bound on this test's own wall time.
	if got := len(b.srv.Messages(1001)); got != 3 {
		t.Fatalf("chat 1001 got %d messages; want 3", got)
	}
}

func TestDirectConversation(t *testing.T) {
	b := setup(t, telegramtest.Options{}, nil)
	tests := []struct {
		id   core.IdentityID
		want core.ConversationID
		ok   bool
	}{
		{"telegram:1001", "telegram:1001", true},
		{"telegram:0", "", false},
		{"telegram:-100", "", false},
		{"telegram:12x", "", false},
		{"telegram:+12", "", false},
		{"webchat:local", "", false},
		{"telegram", "", false},
	}
	for _, tt := range tests {
		got, ok := b.a.DirectConversation(tt.id)
		if got != tt.want || ok != tt.ok {
			t.Errorf("DirectConversation(%q) = %q, %v; want %q, %v", tt.id, got, ok, tt.want, tt.ok)
		}
	}
}

func TestDeleteMessage(t *testing.T) {
	b := setup(t, telegramtest.Options{NoRateLimits: true}, nil)
	ctx := context.Background()
	r, err := b.a.Send(ctx, core.OutMessage{Conversation: "telegram:1001", Text: "token: hunter2"})
	if err != nil {
		t.Fatal(err)
	}
	id := strconv.Itoa(msgIDOf(t, r))
	if err := b.a.DeleteMessage(ctx, "telegram:1001", id); err != nil {
		t.Fatal(err)
	}
	if m, _ := b.srv.Message(1001, msgIDOf(t, r)); !m.Deleted {
		t.Fatal("not deleted")
	}
	if err := b.a.DeleteMessage(ctx, "telegram:1001", id); err != nil {
		t.Fatalf("deleting again: %v", err)
	}
}

func TestAnswerTapWithCardEditsTheTappedMessage(t *testing.T) {
	b := setup(t, telegramtest.Options{}, nil)
	b.start(t)
	c := approvalCard()
	r, err := b.a.Send(context.Background(), core.OutMessage{Conversation: "telegram:1001", Card: c})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := b.srv.Message(1001, msgIDOf(t, r))
	uid, qid := b.srv.Tap(telegramtest.Private(owner), owner, m.ID, m.Keyboard[2][0].CallbackData)
	got := b.waitTurn(t, uid)
	decided := *c
	decided.Status, decided.Outcome, decided.Choices = cards.StatusDeclined, "Declined by telegram:1001. Nothing was run.", nil
	ans := answerOf(got, "Declined.")
	ans.Card, ans.Ref = &decided, r
	if err := b.a.AnswerTap(context.Background(), ans); err != nil {
		t.Fatal(err)
	}
	after, _ := b.srv.Message(1001, m.ID)
	if after.Edits != 1 || len(after.Keyboard) != 0 || !strings.Contains(after.Text, "Declined by") {
		t.Fatalf("tapped message after the answer = %+v", after)
	}
	if a := b.srv.Answers(); len(a) != 1 || a[0].QueryID != qid || a[0].Text != "Declined." {
		t.Fatalf("answers = %+v", a)
	}
	// A second answer (the lane retrying after a failure) is harmless:
	// the same edit, a query Telegram considers answered.
	ans.Text = "again"
	if err := b.a.AnswerTap(context.Background(), ans); err != nil {
		t.Fatalf("second answer: %v", err)
	}
	if a := b.srv.Answers(); len(a) != 1 {
		t.Fatalf("answers = %+v", a)
	}
	// So the outbox may record it lazily (AnswerRepeatable): the repeat
	// edited nothing either. A typed tap's notice is a message: not so.
	typed := ans
	typed.Handle = ""
	if after, _ := b.srv.Message(1001, m.ID); after.Edits != 1 || !b.a.AnswerRepeatable(ans) || b.a.AnswerRepeatable(typed) {
		t.Fatalf("after a repeated answer %d edits; AnswerRepeatable %v, for a typed tap %v", after.Edits, b.a.AnswerRepeatable(ans), b.a.AnswerRepeatable(typed))
	}
	if caps := core.CapabilitiesOf(b.a); !caps.Buttons || !caps.EditInPlace || caps.MaxTextLen != MaxMessageLen {
		t.Fatalf("capabilities = %+v", caps)
	}
}

// A tap typed as text has no callback query: the core's answer — a
// refusal above all, which on a channel with toasts is shown nowhere else —
// comes as a message in the chat, once; an empty answer sends nothing and
// the janitor has no spinner to stop.
func TestTypedTapIsAnsweredWithAMessage(t *testing.T) {
	b := setup(t, telegramtest.Options{}, nil)
	b.start(t)
	ctx := context.Background()
	c := approvalCard()
	r, err := b.a.Send(ctx, core.OutMessage{Conversation: "telegram:1001", Card: c})
	if err != nil {
		t.Fatal(err)
	}
	uid := b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "2", ReplyTo: msgIDOf(t, r)})
	got := b.waitTurn(t, uid)
	if got.Tap == nil || got.Tap.Card != c.ID || got.Tap.Choice != "later" || got.Text != "" {
		t.Fatalf("turn = %+v; want a tap on %s/later", got, c.ID)
	}
	const refusal = "Already decided (declined): nothing was changed."
	if got.TapHandle != "" {
		t.Fatalf("a typed tap has handle %q; want none", got.TapHandle)
	}
	if err := b.a.AnswerTap(ctx, answerOf(got, refusal)); err != nil {
		t.Fatal(err)
	}
	msgs := b.srv.Messages(owner.ID)
	if len(msgs) != 2 || msgs[1].Text != refusal || len(b.srv.Answers()) != 0 {
		t.Fatalf("messages %+v, answers %+v; want the refusal once as a message", msgs, b.srv.Answers())
	}

	uid = b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "approve " + string(c.ID)})
	got = b.waitTurn(t, uid)
	if got.Tap == nil || got.Tap.Choice != "approve" {
		t.Fatalf("turn = %+v", got)
	}
	if err := b.a.AnswerTap(ctx, answerOf(got, "")); err != nil {
		t.Fatal(err)
	}
	if n := len(b.srv.Messages(owner.ID)); n != 2 || len(b.srv.Calls("answerCallbackQuery")) != 0 {
		t.Fatalf("%d messages, %d answers after an empty answer", n, len(b.srv.Calls("answerCallbackQuery")))
	}
}
