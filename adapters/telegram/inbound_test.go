package telegram

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-telegram/bot/models"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

var fuzzBot = botInfo{id: 123456789, username: "silas_test_bot"}

func convert(t *testing.T, raw string) inbound {
	t.Helper()
	_, u, err := decodeUpdate([]byte(raw))
	if err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return updateToTurn(u, fuzzBot, "telegram", MethodPolling)
}

func TestUpdateToTurnTable(t *testing.T) {
	from := `"from":{"id":42,"is_bot":false,"first_name":"Ann","username":"ann"}`
	priv := `"chat":{"id":42,"type":"private"}`
	grp := `"chat":{"id":-100,"type":"group"}`
	card := core.NewID()
	tests := []struct {
		name   string
		raw    string
		act    action
		text   string
		reason string
	}{
		{"direct text", `{"update_id":1,"message":{"message_id":1,"date":1700000000,` + priv + `,` + from + `,"text":"  /help  "}}`, actDeliver, "/help", ""},
		{"group mention (entity)", `{"update_id":2,"message":{"message_id":1,"date":1,` + grp + `,` + from + `,"text":"@SILAS_TEST_BOT /run ls","entities":[{"type":"mention","offset":0,"length":15}]}}`, actDeliver, "/run ls", ""},
		{"group mention as text only (in code, no entity)", `{"update_id":3,"message":{"message_id":1,"date":1,` + grp + `,` + from + `,"text":"@silas_test_bot /run ls","entities":[{"type":"code","offset":0,"length":15}]}}`, actIgnore, "", "not addressed"},
		{"entity beyond the text", `{"update_id":4,"message":{"message_id":1,"date":1,` + grp + `,` + from + `,"text":"hi","entities":[{"type":"mention","offset":1,"length":40}]}}`, actIgnore, "", "not addressed"},
		{"overlapping entities", `{"update_id":5,"message":{"message_id":1,"date":1,` + priv + `,` + from + `,"text":"@silas_test_bot x","entities":[{"type":"mention","offset":0,"length":15},{"type":"mention","offset":3,"length":15}]}}`, actDeliver, "x", ""},
		{"reply to the bot", `{"update_id":6,"message":{"message_id":2,"date":1,` + grp + `,` + from + `,"text":"/pending","reply_to_message":{"message_id":1,"date":1,` + grp + `,"from":{"id":123456789,"is_bot":true,"first_name":"Silas"}}}}`, actDeliver, "/pending", ""},
		{"zero update id", `{"update_id":0,"message":{"message_id":1,"date":1,` + priv + `,` + from + `,"text":"x"}}`, actMalformed, "", "update_id"},
		{"tap", `{"update_id":7,"callback_query":{"id":"q",` + from + `,"message":{"message_id":1,"date":1,` + priv + `},"data":"c:` + card + `:approve"}}`, actDeliver, "", ""},
		{"tap on an inaccessible message", `{"update_id":8,"callback_query":{"id":"q",` + from + `,"message":{"message_id":1,"date":0,` + priv + `},"data":"c:` + card + `:approve"}}`, actDeliver, "", ""},
		{"tap in inline mode", `{"update_id":9,"callback_query":{"id":"q",` + from + `,"inline_message_id":"abc","data":"c:` + card + `:approve"}}`, actUnknownButton, "", "inline"},
		{"tap by a bot", `{"update_id":10,"callback_query":{"id":"q","from":{"id":9,"is_bot":true,"first_name":"B"},"message":{"message_id":1,"date":1,` + priv + `},"data":"c:` + card + `:approve"}}`, actUnknownButton, "", "human"},
		{"tap in someone else's private chat", `{"update_id":11,"callback_query":{"id":"q",` + from + `,"message":{"message_id":1,"date":1,"chat":{"id":43,"type":"private"}},"data":"c:` + card + `:approve"}}`, actUnknownButton, "", "differs"},
		{"tap without id", `{"update_id":12,"callback_query":{` + from + `,"data":"x"}}`, actMalformed, "", "without an id"},
		{"channel post", `{"update_id":13,"channel_post":{"message_id":1,"date":1,"chat":{"id":-5,"type":"channel"},"text":"x"}}`, actIgnore, "", "not handled"},
		{"group with positive id", `{"update_id":14,"message":{"message_id":1,"date":1,"chat":{"id":5,"type":"group"},` + from + `,"text":"@silas_test_bot x","entities":[{"type":"mention","offset":0,"length":15}]}}`, actMalformed, "", "positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := convert(t, tt.raw)
			if r.act != tt.act {
				t.Fatalf("action %s (%s); want %s", r.act, r.reason, tt.act)
			}
			if tt.reason != "" && !strings.Contains(r.reason, tt.reason) {
				t.Errorf("reason %q lacks %q", r.reason, tt.reason)
			}
			if r.act == actDeliver {
				if err := wellFormed(r.turn, "telegram"); err != nil {
					t.Fatal(err)
				}
				if r.turn.Tap == nil && r.turn.Text != tt.text {
					t.Errorf("text %q; want %q", r.turn.Text, tt.text)
				}
			}
		})
	}
}

// FuzzUpdateToTurn: decoding and converting any update never panics, and
// every turn it accepts is well formed.
func FuzzUpdateToTurn(f *testing.F) {
	card := "abcdefghijklmnopqrstuvwxyz"
	for _, s := range []string{
		`{"update_id":1,"message":{"message_id":1,"date":1,"chat":{"id":42,"type":"private"},"from":{"id":42,"is_bot":false,"first_name":"A"},"text":"/run uname -a"}}`,
		`{"update_id":2,"message":{"message_id":1,"date":1,"chat":{"id":-100,"type":"supergroup"},"from":{"id":42,"is_bot":false,"first_name":"A"},"text":"🚀 @silas_test_bot /run x","entities":[{"type":"mention","offset":3,"length":15}]}}`,
		`{"update_id":3,"message":{"message_id":1,"date":1,"chat":{"id":-100,"type":"group"},"from":{"id":42,"is_bot":false,"first_name":"A"},"text":"/run@silas_test_bot ls","entities":[{"type":"bot_command","offset":0,"length":19}]}}`,
		`{"update_id":4,"message":{"message_id":1,"date":1,"chat":{"id":-100,"type":"group"},"from":{"id":42,"is_bot":false,"first_name":"A"},"text":"Silas hi","entities":[{"type":"text_mention","offset":0,"length":5,"user":{"id":123456789,"is_bot":true,"first_name":"Silas"}}]}}`,
		`{"update_id":5,"callback_query":{"id":"q","from":{"id":42,"is_bot":false,"first_name":"A"},"message":{"message_id":1,"date":1,"chat":{"id":42,"type":"private"}},"data":"c:` + card + `:approve"}}`,
		`{"update_id":6,"callback_query":{"id":"q","from":{"id":42,"is_bot":false,"first_name":"A"},"message":{"message_id":1,"date":0,"chat":{"id":-1,"type":"supergroup"}},"data":"c:x:y"}}`,
		`{"update_id":7,"message":{"message_id":1,"date":1,"chat":{"id":-100,"type":"group"},"from":{"id":42,"is_bot":false,"first_name":"A"},"text":"hi","reply_to_message":{"message_id":1,"date":1,"chat":{"id":-100,"type":"group"},"from":{"id":123456789,"is_bot":true,"first_name":"S"}}}}`,
		`{"update_id":8,"edited_message":{"message_id":1,"date":1,"chat":{"id":42,"type":"private"},"text":"x"}}`,
		`{"update_id":9}`, `{}`, `[]`, `null`, `{"update_id":-1,"message":null}`,
		`{"update_id":10,"message":{"message_id":1,"date":1,"chat":{"id":42,"type":"private"},"from":{"id":42,"is_bot":false,"first_name":"A"},"text":"approve ` + card + `"}}`,
		`{"update_id":11,"message":{"message_id":2,"date":1,"chat":{"id":42,"type":"private"},"from":{"id":42,"is_bot":false,"first_name":"A"},"text":"2","reply_to_message":{"message_id":1,"date":1,"chat":{"id":42,"type":"private"},"from":{"id":123456789,"is_bot":true,"first_name":"S"},"reply_markup":{"inline_keyboard":[[{"text":"Run","callback_data":"c:` + card + `:approve"}],[{"text":"No","callback_data":"c:` + card + `:decline"}]]}}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		id, u, err := decodeUpdate(raw)
		if err != nil {
			return
		}
		if u == nil {
			t.Fatal("no error and no update")
		}
		for _, method := range []string{MethodPolling, MethodWebhook} {
			r := updateToTurn(u, fuzzBot, "telegram", method)
			switch r.act {
			case actDeliver:
				tr := r.turn
				if err := wellFormed(tr, "telegram"); err != nil {
					t.Fatalf("accepted a malformed turn: %v\n%+v", err, tr)
				}
				if tr.EventID != "u"+strconv.FormatInt(id, 10) || id <= 0 || tr.Evidence.Method != method {
					t.Fatalf("event id %q / evidence %+v for update %d", tr.EventID, tr.Evidence, id)
				}
				if n, err := strconv.ParseInt(strings.TrimPrefix(string(tr.Sender), "telegram:"), 10, 64); err != nil || n <= 0 {
					t.Fatalf("sender %q", tr.Sender)
				}
				if !utf8.ValidString(tr.Text) || !utf8.ValidString(tr.SenderName) || tr.Text != strings.TrimSpace(tr.Text) {
					t.Fatalf("text %q / name %q", tr.Text, tr.SenderName)
				}
				if tr.Tap != nil && r.queryID == "" && !r.typed {
					t.Fatal("a tap without a query id to answer")
				}
				if r.typed && (u.Message == nil || tr.Tap == nil || tr.Text != "" || tr.PlatformMessageID != "") {
					t.Fatalf("typed tap %+v from update %+v", tr, u)
				}
				if tr.ChatKind == core.ChatGroup && u.Message != nil && !strings.Contains(strings.ToLower(u.Message.Text), "@silas_test_bot") && u.Message.ReplyToMessage == nil && !hasTextMention(u.Message) {
					t.Fatalf("group message delivered without being addressed: %q", u.Message.Text)
				}
			case actUnknownButton:
				if r.queryID == "" {
					t.Fatal("unknown button without a query id")
				}
			}
		}
	})
}

func hasTextMention(m *models.Message) bool {
	for _, e := range m.Entities {
		if e.Type == models.MessageEntityTypeTextMention {
			return true
		}
	}
	return false
}

// TestTypedTapTable: the text fallback. A typed choice ("approve <id>", or
// "1"/"2" in reply to one of the bot's cards) becomes the Tap a button
// sends; anything else stays text. A quoted card counts only when the bot
// sent it and all its buttons name one card.
func TestTypedTapTable(t *testing.T) {
	card := core.NewID()
	other := core.NewID()
	from := `"from":{"id":42,"is_bot":false,"first_name":"Ann"}`
	priv := `"chat":{"id":42,"type":"private"}`
	grp := `"chat":{"id":-100,"type":"supergroup"}`
	bot := `"from":{"id":123456789,"is_bot":true,"first_name":"Silas"}`
	human := `"from":{"id":7,"is_bot":false,"first_name":"Eve"}`
	kb := func(datas ...string) string {
		var rows []string
		for _, d := range datas {
			rows = append(rows, `[{"text":"b","callback_data":"`+d+`"}]`)
		}
		return `"reply_markup":{"inline_keyboard":[` + strings.Join(rows, ",") + `]}`
	}
	cardKB := kb("c:"+card+":approve", "c:"+card+":decline")
	msg := func(chat, text, extra string) string {
		if extra != "" {
			extra = "," + extra
		}
		return `{"update_id":1,"message":{"message_id":5,"date":1,` + chat + `,` + from + `,"text":"` + text + `"` + extra + `}}`
	}
	reply := func(chat, who, markup string) string {
		r := `"reply_to_message":{"message_id":4,"date":1,` + chat + `,` + who + `,"text":"card"`
		if markup != "" {
			r += "," + markup
		}
		return r + "}"
	}
	tests := []struct {
		name string
		raw  string
		act  action
		tap  *core.Tap // nil: delivered as text
		text string
	}{
		{"approve with id", msg(priv, "approve "+card, ""), actDeliver, &core.Tap{Card: cards.ID(card), Choice: "approve"}, ""},
		{"decline, upper case, quoted", msg(priv, `\"DECLINE `+strings.ToUpper(card)+`\"`, ""), actDeliver, &core.Tap{Card: cards.ID(card), Choice: "decline"}, ""},
		{"1 replying to the bot's card", msg(priv, "1", reply(priv, bot, cardKB)), actDeliver, &core.Tap{Card: cards.ID(card), Choice: "approve"}, ""},
		{"2. replying to the bot's card", msg(priv, "2.", reply(priv, bot, cardKB)), actDeliver, &core.Tap{Card: cards.ID(card), Choice: "decline"}, ""},
		{"choice word replying to the card", msg(priv, "decline", reply(priv, bot, cardKB)), actDeliver, &core.Tap{Card: cards.ID(card), Choice: "decline"}, ""},
		{"3 is no choice of the card", msg(priv, "3", reply(priv, bot, cardKB)), actDeliver, nil, "3"},
		{"1 replying to a person's message with our buttons", msg(priv, "1", reply(priv, human, cardKB)), actDeliver, nil, "1"},
		{"1 replying to the bot's message without buttons", msg(priv, "1", reply(priv, bot, "")), actDeliver, nil, "1"},
		{"1 replying to buttons of two cards", msg(priv, "1", reply(priv, bot, kb("c:"+card+":approve", "c:"+other+":decline"))), actDeliver, nil, "1"},
		{"1 replying to a foreign button", msg(priv, "1", reply(priv, bot, kb("x:"+card+":approve"))), actDeliver, nil, "1"},
		{"1 without a reply", msg(priv, "1", ""), actDeliver, nil, "1"},
		{"approve without an id", msg(priv, "approve now", ""), actDeliver, nil, "approve now"},
		{"group, not addressed", msg(grp, "approve "+card, ""), actIgnore, nil, ""},
		{"group, addressed by mention", msg(grp, "@silas_test_bot approve "+card, `"entities":[{"type":"mention","offset":0,"length":15}]`), actDeliver, &core.Tap{Card: cards.ID(card), Choice: "approve"}, ""},
		{"group, 2 replying to the bot's card", msg(grp, "2", reply(grp, bot, cardKB)), actDeliver, &core.Tap{Card: cards.ID(card), Choice: "decline"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := convert(t, tt.raw)
			if r.act != tt.act {
				t.Fatalf("action %s (%s); want %s", r.act, r.reason, tt.act)
			}
			if r.act != actDeliver {
				return
			}
			if err := r.turn.Validate(); err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.tap == nil:
				if r.turn.Tap != nil || r.typed || r.turn.Text != tt.text || r.turn.PlatformMessageID == "" {
					t.Fatalf("turn = %+v (typed %v); want the text %q", r.turn, r.typed, tt.text)
				}
			default:
				if r.turn.Tap == nil || *r.turn.Tap != *tt.tap || !r.typed || r.queryID != "" {
					t.Fatalf("turn = %+v (typed %v); want the tap %+v", r.turn, r.typed, *tt.tap)
				}
				// The same turn as a button's: no text, no message id.
				if r.turn.Text != "" || r.turn.PlatformMessageID != "" || r.turn.Sender != "telegram:42" {
					t.Fatalf("typed tap turn = %+v", r.turn)
				}
			}
		})
	}
}
