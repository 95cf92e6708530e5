package telegram

import (
	"strings"

	"github.com/silas-gateway/silas/core"
)

// AnswerRepeatable implements core.RepeatableAnswerer: AnswerTap done again
// shows nothing new when the tap came with a callback query — the card's
// edit is identical (Telegram's 400 "message is not modified" is a success,
// Update) and a second answerCallbackQuery is refused as "query is too old
// … or query ID is invalid", which answer treats as done. A tap typed as
// text has no query: its notice, if any, is a message, shown again.
func (a *Adapter) AnswerRepeatable(ans core.TapAnswer) bool {
	return ans.Handle != "" || strings.TrimSpace(ans.Text) == ""
}
