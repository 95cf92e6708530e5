package whatsapp

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mau.fi/whatsmeow"
	"go.mau.fi/whatsmeow/proto/waE2E"
	"go.mau.fi/whatsmeow/types"
	"go.mau.fi/whatsmeow/types/events"
	"google.golang.org/protobuf/proto"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

var (
	owner  = types.NewJID("4915112345678", types.DefaultUserServer)
	other  = types.NewJID("4915187654321", types.DefaultUserServer)
	group  = types.NewJID("120363000000000001", types.GroupServer)
	cardID = cards.ID("abcdefghijklmnopqrstuvwxyz")
)

type bundle struct {
	a      *Adapter
	wa     *fakeWA
	in     *recInbox
	now    *time.Time
	mu     sync.Mutex
	notify []string
	cancel context.CancelFunc
	done   chan struct{}
}

func setup(t *testing.T, mode string) *bundle {
	t.Helper()
	b := &bundle{wa: newFakeWA(t), in: &recInbox{}, done: make(chan struct{})}
	now := time.Unix(1_800_000_000, 0)
	b.now = &now
	a, err := New(Config{Client: b.wa, Cards: mode, Now: func() time.Time { b.mu.Lock(); defer b.mu.Unlock(); return *b.now },
		Limits: limitsFast, Logger: slog.New(slog.DiscardHandler),
		ReconnectMin: time.Millisecond, ReconnectMax: 10 * time.Millisecond,
		Notify: func(_ context.Context, s string) { b.mu.Lock(); b.notify = append(b.notify, s); b.mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	b.a = a
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	go func() { defer close(b.done); _ = a.Run(ctx, b.in) }()
	t.Cleanup(func() { cancel(); <-b.done })
	eventually(t, "connected", func() bool { return b.wa.IsConnected() && a.Status().Connected })
	return b
}

func (b *bundle) advance(d time.Duration) { b.mu.Lock(); *b.now = b.now.Add(d); b.mu.Unlock() }

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testCard(status cards.Status, choices ...cards.Choice) *cards.Card {
	return &cards.Card{ID: cardID, Kind: cards.KindApproval, Intent: "Run uname -a", Risk: cards.RiskLow,
		Rationale: "You asked for it.", Command: "uname -a", Status: status, Choices: choices}
}

var approveDecline = []cards.Choice{{ID: "approve", Label: "Run `uname -a`"}, {ID: "decline", Label: "Skip"}}

func conv(chat types.JID) core.ConversationID { return conversation("whatsapp", chat) }

// cardMsg is a card as the outbox hands it to a channel without buttons:
// with its plain text.
func cardMsg(c core.ConversationID, card *cards.Card) core.OutMessage {
	return core.OutMessage{Conversation: c, Card: card, CardText: card.PlainText()}
}

func TestPollCardVoteDecisionEdit(t *testing.T) {
	b := setup(t, CardsPoll)
	ctx := context.Background()
	r, err := b.a.Send(ctx, cardMsg(conv(owner), testCard(cards.StatusPending, approveDecline...)))
	if err != nil {
		t.Fatal(err)
	}
	sent := b.wa.sentMsgs()
	if len(sent) != 2 || !strings.Contains(sent[0].msg.GetConversation(), "Run uname -a") {
		t.Fatalf("want card text then poll, got %+v", sent)
	}
	poll := sent[1].msg.GetPollCreationMessageV3()
	if poll == nil {
		poll = sent[1].msg.GetPollCreationMessage()
	}
	if poll == nil || len(poll.GetOptions()) != 2 || poll.GetSelectableOptionsCount() != 1 {
		t.Fatalf("second message is not a single-choice poll of the card's choices: %v", sent[1].msg)
	}
	if string(r) != owner.String()+"/"+sent[0].id {
		t.Fatalf("Send returned %q, want the card text's ref", r)
	}
	// The owner votes for option 1: decrypted (whatsmeow) to the option's
	// SHA-256, mapped to the choice id.
	b.wa.votes["VOTE1"] = &waE2E.PollVoteMessage{SelectedOptions: whatsmeow.HashPollOptions([]string{poll.GetOptions()[0].GetOptionName()})}
	if !b.wa.emit(voteEvent("VOTE1", owner, owner, sent[1].id)) {
		t.Fatal("vote not acknowledged")
	}
	turns := b.in.all()
	if len(turns) != 1 || turns[0].Tap == nil || *turns[0].Tap != (core.Tap{Card: cardID, Choice: "approve"}) ||
		turns[0].Sender != "whatsapp:4915112345678" || turns[0].Evidence.Method != MethodE2E {
		t.Fatalf("vote became %+v", turns)
	}
	// A vote for an option not on the card, a withdrawn vote and an
	// undecryptable one change nothing.
	b.wa.votes["VOTE2"] = &waE2E.PollVoteMessage{SelectedOptions: whatsmeow.HashPollOptions([]string{"3. Delete everything"})}
	b.wa.votes["VOTE3"] = &waE2E.PollVoteMessage{}
	for _, id := range []string{"VOTE2", "VOTE3", "VOTE4"} {
		b.wa.emit(voteEvent(id, owner, owner, sent[1].id))
	}
	if n := len(b.in.all()); n != 1 {
		t.Fatalf("%d turns after invalid votes", n)
	}
	// The decision: the card is edited in place (within the window).
	if err := b.a.Update(ctx, r, cardMsg(conv(owner), testCard(cards.StatusApproved))); err != nil {
		t.Fatal(err)
	}
	sent = b.wa.sentMsgs()
	last := sent[len(sent)-1].msg
	pm := last.GetEditedMessage().GetMessage().GetProtocolMessage()
	if pm.GetType() != waE2E.ProtocolMessage_MESSAGE_EDIT || pm.GetKey().GetID() != sent[0].id ||
		!strings.Contains(pm.GetEditedMessage().GetConversation(), "Status: approved") {
		t.Fatalf("update is not an edit of the card: %v", last)
	}
	// Identical content: no message at all.
	n := len(sent)
	if err := b.a.Update(ctx, r, cardMsg(conv(owner), testCard(cards.StatusApproved))); err != nil {
		t.Fatal(err)
	}
	if len(b.wa.sentMsgs()) != n {
		t.Fatal("an identical update sent something")
	}
	// Past the edit window: a reply quoting the card.
	b.advance(16 * time.Minute)
	if err := b.a.Update(ctx, r, cardMsg(conv(owner), testCard(cards.StatusDone))); err != nil {
		t.Fatal(err)
	}
	sent = b.wa.sentMsgs()
	et := sent[len(sent)-1].msg.GetExtendedTextMessage()
	if et == nil || et.GetContextInfo().GetStanzaID() != sent[0].id || !strings.Contains(et.GetText(), "done") {
		t.Fatalf("past the window: want a reply quoting the card, got %v", sent[len(sent)-1].msg)
	}
}

func TestNonApproverVoteAnsweredOtherRefusalsSilent(t *testing.T) {
	b := setup(t, CardsPoll)
	ctx := context.Background()
	vote := core.TapAnswer{Conversation: conv(owner), EventID: "vx/1"}
	n := len(b.wa.sentMsgs())
	for _, reason := range []string{core.RefusedAlreadyDecided, core.RefusedExpired, core.RefusedBadChoice} {
		vote.Text, vote.Refused = "no", reason
		if err := b.a.AnswerTap(ctx, vote); err != nil {
			t.Fatal(err)
		}
	}
	if len(b.wa.sentMsgs()) != n {
		t.Fatal("a refused vote other than a non-approver's was answered")
	}
	vote.Text, vote.Refused = "Only the owner may decide this.", core.RefusedNotApprover
	if err := b.a.AnswerTap(ctx, vote); err != nil {
		t.Fatal(err)
	}
	text := core.TapAnswer{Conversation: conv(owner), EventID: "m4915112345678/X", Text: "This card expired.", Refused: core.RefusedExpired}
	if err := b.a.AnswerTap(ctx, text); err != nil {
		t.Fatal(err)
	}
	if got := len(b.wa.sentMsgs()) - n; got != 2 {
		t.Fatalf("%d answers, want 2 (non-approver vote, refused text reply)", got)
	}
}

func TestNumberedReplyQuotingCard(t *testing.T) {
	b := setup(t, CardsNumbered)
	ctx := context.Background()
	r, err := b.a.Send(ctx, cardMsg(conv(owner), testCard(cards.StatusPending, approveDecline...)))
	if err != nil {
		t.Fatal(err)
	}
	sent := b.wa.sentMsgs()
	if len(sent) != 1 || !strings.Contains(sent[0].msg.GetConversation(), `1. Run `+"`uname -a`") {
		t.Fatalf("numbered card: %+v", sent)
	}
	_, id, _ := parseRef(r)
	ci := &waE2E.ContextInfo{StanzaID: proto.String(id), Participant: proto.String(ownJID.String())}
	b.wa.emit(textEvent("R1", owner, owner, "2", ci))
	// Text fallback, no quote needed.
	b.wa.emit(textEvent("R2", owner, owner, "approve "+string(cardID), nil))
	// "1" without a quote is just text.
	b.wa.emit(textEvent("R3", owner, owner, "1", nil))
	turns := b.in.all()
	if len(turns) != 3 || turns[0].Tap == nil || turns[0].Tap.Choice != "decline" ||
		turns[1].Tap == nil || turns[1].Tap.Choice != "approve" || turns[2].Tap != nil || turns[2].Text != "1" {
		t.Fatalf("turns %+v", turns)
	}
}

func TestOfflineBatchAfterReconnectOnceAndRedelivery(t *testing.T) {
	b := setup(t, CardsPoll)
	b.wa.emit(textEvent("A1", owner, owner, "/run uname -a", nil))
	// The connection drops (a 408 keepalive timeout, then Disconnected):
	// the adapter reconnects on its own.
	b.wa.Disconnect()
	b.wa.emit(&events.KeepAliveTimeout{ErrorCount: 3})
	b.wa.emit(&events.Disconnected{})
	eventually(t, "reconnect", func() bool { return b.wa.IsConnected() && b.wa.connects >= 2 })
	// The offline batch: new messages, plus one already delivered before.
	b.wa.emit(&events.OfflineSyncPreview{Total: 3, Messages: 3})
	for _, ev := range []*events.Message{textEvent("A2", owner, owner, "hello", nil), textEvent("A1", owner, owner, "/run uname -a", nil), textEvent("A3", other, other, "hi", nil)} {
		if !b.wa.emit(ev) {
			t.Fatalf("%s not acknowledged", ev.Info.ID)
		}
	}
	b.wa.emit(&events.OfflineSyncCompleted{Count: 3})
	turns := b.in.all()
	if len(turns) != 3 || turns[1].Text != "hello" || turns[2].Sender != "whatsapp:4915187654321" {
		t.Fatalf("turns %+v", turns)
	}
	// Storage fails: the message stays unacknowledged, so WhatsApp
	// redelivers it; once stored, it is acknowledged.
	b.in.mu.Lock()
	b.in.fail = errors.New("database down")
	b.in.mu.Unlock()
	if b.wa.emit(textEvent("A4", owner, owner, "later", nil)) {
		t.Fatal("a message whose turn was not stored was acknowledged")
	}
	b.in.mu.Lock()
	b.in.fail = nil
	b.in.mu.Unlock()
	if !b.wa.emit(textEvent("A4", owner, owner, "later", nil)) || len(b.in.all()) != 4 {
		t.Fatal("redelivered message not stored once")
	}
}

func TestFatalEventsNotifyAndStopReconnecting(t *testing.T) {
	tests := []struct {
		name string
		evt  any
		want string
	}{
		{"logged out", &events.LoggedOut{}, "silas whatsapp link"},
		{"stream replaced", &events.StreamReplaced{}, "only one `silas serve`"},
		{"temporary ban", &events.TemporaryBan{Code: events.TempBanSentToTooManyPeople, Expire: time.Hour}, "banned"},
		{"client outdated", &events.ClientOutdated{}, "Update Silas"},
		{"connect failure logged out", &events.ConnectFailure{Reason: events.ConnectFailureLoggedOut}, "Link it again"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t, CardsPoll)
			b.wa.Disconnect()
			b.wa.emit(tc.evt)
			b.mu.Lock()
			got := strings.Join(b.notify, "\n")
			b.mu.Unlock()
			if !strings.Contains(got, tc.want) || !strings.Contains(b.a.Status().Problem, tc.want) {
				t.Fatalf("owner told %q, status %q; want %q", got, b.a.Status().Problem, tc.want)
			}
			// whatsmeow dispatches Connected from its own goroutine after
			// the post-login IQs: the old connection's can come after the
			// fatal event, and must not clear the problem.
			b.wa.emit(&events.Connected{})
			if p := b.a.Status().Problem; !strings.Contains(p, tc.want) {
				t.Fatalf("a late Connected of the old connection cleared the problem: status %q", p)
			}
			b.wa.emit(&events.Disconnected{})
			time.Sleep(50 * time.Millisecond) // a reconnect would have happened by now (1ms backoff)
			if b.wa.IsConnected() {
				t.Fatal("reconnected after a fatal condition")
			}
		})
	}
}

func TestGroupsOnlyOnMentionOrReply(t *testing.T) {
	b := setup(t, CardsPoll)
	b.wa.emit(textEvent("G1", other, group, "/run ls", nil))
	b.wa.emit(textEvent("G2", other, group, "@4915100000001 /run ls", &waE2E.ContextInfo{MentionedJID: []string{ownJID.String()}}))
	b.wa.emit(textEvent("G3", owner, group, "run id", &waE2E.ContextInfo{StanzaID: proto.String("3EB0X"), Participant: proto.String(ownJID.String())}))
	turns := b.in.all()
	if len(turns) != 2 || turns[0].Text != "/run ls" || turns[0].ChatKind != core.ChatGroup || turns[1].Text != "/run id" ||
		turns[0].Conversation != conv(group) {
		t.Fatalf("turns %+v", turns)
	}
}

func TestLIDSender(t *testing.T) {
	b := setup(t, CardsPoll)
	lid := types.NewJID("123456789012345", types.HiddenUserServer)
	unknown := types.NewJID("999999999999999", types.HiddenUserServer)
	b.wa.lids[lid] = owner
	b.wa.emit(textEvent("L1", lid, lid, "hello", nil))
	b.wa.emit(textEvent("L2", unknown, unknown, "hello", nil))
	turns := b.in.all()
	if len(turns) != 2 || turns[0].Sender != "whatsapp:4915112345678" || turns[0].Conversation != conv(owner) ||
		turns[1].Sender != "whatsapp:lid-999999999999999" {
		t.Fatalf("turns %+v", turns)
	}
}

func TestSecretPasteRevokeOnlyOwnOrGroup(t *testing.T) {
	b := setup(t, CardsPoll)
	ctx := context.Background()
	// Someone else's message in a direct chat: WhatsApp cannot delete it.
	err := b.a.DeleteMessage(ctx, conv(owner), platformID(owner, "P1"))
	var pe *core.PermanentError
	if !errors.As(err, &pe) {
		t.Fatalf("revoking another's DM message: %v, want a permanent error", err)
	}
	// The owner's own "Message yourself" chat (Silas linked to the owner's
	// number): our own message, revoked for everyone.
	if err := b.a.DeleteMessage(ctx, conv(ownJID), platformID(ownJID, "P2")); err != nil {
		t.Fatal(err)
	}
	sent := b.wa.sentMsgs()
	pm := sent[len(sent)-1].msg.GetProtocolMessage()
	if pm.GetType() != waE2E.ProtocolMessage_REVOKE || pm.GetKey().GetID() != "P2" || !pm.GetKey().GetFromMe() {
		t.Fatalf("not a revoke of our own message: %v", pm)
	}
}

func TestLongTextSplit(t *testing.T) {
	b := setup(t, CardsPoll)
	long := strings.Repeat("x", MaxMessageLen) + "\n" + strings.Repeat("y", 10)
	if _, err := b.a.Send(context.Background(), core.OutMessage{Conversation: conv(owner), Text: long}); err != nil {
		t.Fatal(err)
	}
	sent := b.wa.sentMsgs()
	if len(sent) != 2 || len([]rune(sent[0].msg.GetConversation())) > MaxMessageLen {
		t.Fatalf("%d messages", len(sent))
	}
}

func TestTypingBeforeText(t *testing.T) {
	wa := newFakeWA(t)
	wa.connected = true
	a, err := New(Config{Client: wa, Typing: true, Limits: limitsFast, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Send(context.Background(), core.OutMessage{Conversation: conv(owner), Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	if len(wa.typing) != 1 || wa.typing[0] != owner {
		t.Fatalf("typing presence %v", wa.typing)
	}
}

func TestNotLinkedIsReportedNotRetried(t *testing.T) {
	wa := newFakeWA(t)
	wa.notLinked = true
	var told []string
	var mu sync.Mutex
	a, err := New(Config{Client: wa, Limits: limitsFast, Logger: slog.New(slog.DiscardHandler), ReconnectMin: time.Millisecond,
		Notify: func(_ context.Context, s string) { mu.Lock(); told = append(told, s); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx, &recInbox{}) }()
	eventually(t, "the problem reported", func() bool { return strings.Contains(a.Status().Problem, "silas whatsapp link") })
	time.Sleep(30 * time.Millisecond)
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if wa.connects != 1 || len(told) != 1 {
		t.Fatalf("%d connect attempts, owner told %q; want 1 and one notice", wa.connects, told)
	}
}

// TestLinkOfferedWhenNotLinked: the first serve without a device offers
// linking (Config.Link) once; when the phone confirms, the channel
// connects with the new device, when linking fails it is reported like a
// logout and not offered again.
func TestLinkOfferedWhenNotLinked(t *testing.T) {
	tests := []struct {
		name    string
		linkErr error
		want    string // the problem; "" = connected
	}{
		{"linked", nil, ""},
		{"not scanned", errors.New("no code was scanned in time"), "silas whatsapp link"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wa := newFakeWA(t)
			wa.notLinked = true
			var mu sync.Mutex
			offers, told := 0, []string{}
			a, err := New(Config{Client: wa, Limits: limitsFast, Logger: slog.New(slog.DiscardHandler), ReconnectMin: time.Millisecond,
				Notify: func(_ context.Context, s string) { mu.Lock(); told = append(told, s); mu.Unlock() },
				Link: func(context.Context) error {
					mu.Lock()
					offers++
					mu.Unlock()
					if tc.linkErr == nil {
						wa.mu.Lock()
						wa.notLinked = false
						wa.mu.Unlock()
					}
					return tc.linkErr
				}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = a.Run(ctx, &recInbox{}) }()
			defer func() { cancel(); <-done }()
			if tc.want == "" {
				eventually(t, "connected with the new device", func() bool { return wa.IsConnected() })
			} else {
				eventually(t, "the problem reported", func() bool { return strings.Contains(a.Status().Problem, tc.want) })
			}
			time.Sleep(30 * time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			if offers != 1 || (tc.want == "") != (len(told) == 0) {
				t.Fatalf("linking offered %d times, owner told %q", offers, told)
			}
		})
	}
}

// TestReplyQuotingOwnMessageCarriesItsRef: a text quoting the bot's card
// (a choice it does not name) is a message whose ReplyTo is the card's
// ref as Send returned it (what the outbox records), so a flow's gate
// takes it; quoting someone else's message carries none.
func TestReplyQuotingOwnMessageCarriesItsRef(t *testing.T) {
	b := setup(t, CardsNumbered)
	r, err := b.a.Send(context.Background(), cardMsg(conv(owner), testCard(cards.StatusPending, approveDecline...)))
	if err != nil {
		t.Fatal(err)
	}
	_, id, _ := parseRef(r)
	b.wa.emit(textEvent("Q1", owner, owner, "ship it on friday", &waE2E.ContextInfo{StanzaID: proto.String(id), Participant: proto.String(ownJID.String())}))
	b.wa.emit(textEvent("Q2", owner, owner, "and this", &waE2E.ContextInfo{StanzaID: proto.String("ABC123"), Participant: proto.String(other.String())}))
	turns := b.in.all()
	if len(turns) != 2 || turns[0].Tap != nil || turns[0].Text != "ship it on friday" || turns[0].ReplyTo != r || turns[1].ReplyTo != "" {
		t.Fatalf("turns %+v (card ref %q)", turns, r)
	}
}
