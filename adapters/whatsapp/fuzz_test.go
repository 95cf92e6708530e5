package whatsapp

import (
	"context"
	"testing"

	"go.mau.fi/whatsmeow/proto/waE2E"
	"go.mau.fi/whatsmeow/types"
	"google.golang.org/protobuf/proto"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core"
)

// FuzzMessageToTurn: any text, quote, mention, sender and chat either is
// ignored or becomes a turn the core accepts the shape of; never a panic.
func FuzzMessageToTurn(f *testing.F) {
	f.Add("4915112345678", "s.whatsapp.net", "4915112345678", "s.whatsapp.net", "/run uname -a", "", "", false)
	f.Add("123456789012345", "lid", "120363000000000001", "g.us", "@4915100000001 hi", "3EB0", "4915100000001@s.whatsapp.net", false)
	f.Add("4915100000001", "s.whatsapp.net", "4915100000001", "s.whatsapp.net", "run ls", "", "", true)
	f.Add("", "", "status", "broadcast", "\xff", "", "", false)
	f.Fuzz(func(t *testing.T, sUser, sServer, cUser, cServer, text, quoted, participant string, fromMe bool) {
		ci := &waE2E.ContextInfo{StanzaID: proto.String(quoted), Participant: proto.String(participant), MentionedJID: []string{participant}}
		e := textEvent("ID1", types.NewJID(sUser, sServer), types.NewJID(cUser, cServer), text, ci)
		e.Info.IsFromMe = fromMe
		lids := func(types.JID) types.JID { return types.NewJID(sUser, types.DefaultUserServer) }
		in := messageToTurn(e, self{pn: ownJID}, lids, "whatsapp")
		if in.act == actDeliver {
			if err := in.turn.Validate(); err != nil {
				t.Fatalf("turn %+v: %v", in.turn, err)
			}
		}
	})
}

// FuzzNumberedReply: a reply quoting a card (or not) is a tap only for a
// choice the card offers, on that card.
func FuzzNumberedReply(f *testing.F) {
	for _, s := range []string{"1", "2", "3", "0", "approve abcdefghijklmnopqrstuvwxyz", "decline x", " 1. ", "\"1\"", "confirm"} {
		f.Add(s, true)
	}
	a := &Adapter{recs: newRecords(nil, "whatsapp")}
	ctx := context.Background()
	_ = a.recs.putCard(ctx, cardRec{ID: "CARDMSG", Card: cardID, Choices: []string{"approve", "decline"}})
	f.Fuzz(func(t *testing.T, text string, quote bool) {
		q := ""
		if quote {
			q = "CARDMSG"
		}
		tap, ok := a.textTap(ctx, text, q)
		if !ok {
			return
		}
		if tap.Card == "" || tap.Choice == "" || len(tap.Card) > core.MaxTapCard || len(tap.Choice) > core.MaxTapChoice {
			t.Fatalf("malformed tap %+v from %q", tap, text)
		}
		if tap.Card == cardID {
			if tap.Choice != "approve" && tap.Choice != "decline" && !contains(kit.TextChoices, tap.Choice) {
				t.Fatalf("choice %q not on the card from %q", tap.Choice, text)
			}
		} else if quote && !contains(kit.TextChoices, tap.Choice) {
			t.Fatalf("tap on another card %+v from a reply quoting %s", tap, cardID)
		}
	})
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
