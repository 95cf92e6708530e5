package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/silas-gateway/silas/core"
)

// answerTap answers a processed tap on channels that can: with the refusal
// reason where the channel takes it (core.TapOutcomeAnswerer), so a client
// can match a refusal to its tap, else the notice alone.
func (e *Engine) answerTap(ctx context.Context, t core.Turn, text, refused string) {
	ch := e.channels[t.Channel]
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var err error
	switch ta := ch.(type) {
	case core.TapOutcomeAnswerer:
		err = ta.AnswerTapOutcome(actx, t, text, refused)
	case core.TapAnswerer:
		err = ta.AnswerTap(actx, t, text)
	default:
		return
	}
	if err != nil {
		e.log.Warn("could not answer tap", slog.String("channel", string(t.Channel)), slog.Any("err", err))
	}
}
