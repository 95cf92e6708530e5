//go:build !race

// Not built with -race: see realclient_test.go.

package whatsapp

import (
	"context"
	"log/slog"
	"testing"

	"go.mau.fi/whatsmeow/proto/waE2E"
	"google.golang.org/protobuf/proto"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/internal/pgtest"
)

// TestRealClientGroups: a phone writes in a group the device belongs to,
// sender-key encrypted as WhatsApp clients do (the sender key first comes
// in the phone's Signal session). Only a message that mentions Silas's
// number or replies to one of Silas's messages is a turn (the mention cut
// out); other chatter, and a reply to someone else, is acknowledged and
// ignored.
func TestRealClientGroups(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	r := newRealRig(t, pgtest.NewDatabase(t), log)
	in := &recInbox{}
	a := r.adapter(t, log)
	r.run(t, a, in)
	bot := botJID.String()
	ext := func(text string, ci *waE2E.ContextInfo) *waE2E.Message {
		return &waE2E.Message{ExtendedTextMessage: &waE2E.ExtendedTextMessage{Text: proto.String(text), ContextInfo: ci}}
	}
	msgs := []struct {
		id   string
		m    *waE2E.Message
		want string // the turn's text; "" = ignored
	}{
		{"3EB0EEEE0001", &waE2E.Message{Conversation: proto.String("lunch at noon?")}, ""},
		{"3EB0EEEE0002", ext("@"+botJID.User+" run uname -a", &waE2E.ContextInfo{MentionedJID: []string{bot}}), "/run uname -a"},
		{"3EB0EEEE0003", ext("sure", &waE2E.ContextInfo{StanzaID: proto.String("3EB0FFFF0001"), Participant: proto.String(other.String()),
			QuotedMessage: &waE2E.Message{Conversation: proto.String("coffee?")}}), ""},
		{"3EB0EEEE0004", ext("and the disk?", &waE2E.ContextInfo{StanzaID: proto.String("3EB0FFFF0002"), Participant: proto.String(bot),
			QuotedMessage: &waE2E.Message{Conversation: proto.String("Linux")}}), "and the disk?"},
	}
	var want []string
	for _, m := range msgs {
		if err := r.srv.SendGroupMessage(context.Background(), r.phone, r.dev, group, m.id, m.m); err != nil {
			t.Fatal(err)
		}
		if m.want != "" {
			want = append(want, m.want)
		}
	}
	eventually(t, "every group message acknowledged", func() bool {
		for _, m := range msgs {
			if r.srv.Receipts(m.id) != 1 {
				return false
			}
		}
		return true
	})
	turns := in.all()
	if len(turns) != len(want) {
		t.Fatalf("turns %+v; want %q", turns, want)
	}
	for i, tr := range turns {
		if tr.Text != want[i] || tr.ChatKind != core.ChatGroup || tr.Conversation != conversation("whatsapp", group) ||
			tr.Sender != "whatsapp:"+core.IdentityID(owner.User) || tr.Evidence.Method != MethodE2E {
			t.Fatalf("turn %d: %+v", i, tr)
		}
	}
	if o := r.srv.OtherReceipts(); len(o) != 0 {
		t.Fatalf("retry receipts (the device could not decrypt): %v", o)
	}
}
