package telegram

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-telegram/bot/models"

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
				if tr.Tap != nil && r.queryID == "" {
					t.Fatal("a tap without a query id to answer")
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
