package discord

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/bwmarrin/discordgo"

	"github.com/silas-gateway/silas/adapters/kit"
)

// Discord JSON error codes the adapter tells apart.
const (
	codeUnknownMessage = 10008
	codeUnknownChannel = 10003
	codeMissingAccess  = 50001
	codeCannotDM       = 50007
	codeMissingPerms   = 50013
)

// mapError classifies a discordgo error for the outbox: a 429 is
// core.RateLimitedError with Discord's retry_after (global or per route),
// 4xx other than 401/404/408 are permanent, the rest retryable. URLs are
// dropped from transport errors (interaction and webhook URLs carry
// tokens).
func mapError(op string, err error) error {
	if err == nil {
		return nil
	}
	var rl *discordgo.RateLimitError
	if errors.As(err, &rl) && rl.RateLimit != nil && rl.TooManyRequests != nil {
		return kit.RateLimited(rl.TooManyRequests.RetryAfter, fmt.Errorf("discord: %s: rate limited", op))
	}
	var re *discordgo.RESTError
	if errors.As(err, &re) && re.Response != nil {
		msg := ""
		code := 0
		if re.Message != nil {
			msg, code = re.Message.Message, re.Message.Code
		}
		e := fmt.Errorf("discord: %s: HTTP %d: %s (code %d)", op, re.Response.StatusCode, msg, code)
		if re.Response.StatusCode == http.StatusNotFound && code != 0 {
			// An unknown message or channel will not come back.
			return kit.Permanent(e)
		}
		return kit.ByStatus(re.Response.StatusCode, 0, e)
	}
	return fmt.Errorf("discord: %s: %w", op, kit.RedactURL(err))
}

// apiCode returns Discord's JSON error code of err, or 0.
func apiCode(err error) int {
	var re *discordgo.RESTError
	if errors.As(err, &re) && re.Message != nil {
		return re.Message.Code
	}
	return 0
}
