package mcp

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/silas-gateway/silas/core/callgate"
)

// Path is where serve mounts the endpoint.
const Path = "/mcp"

const callerKey = "silas_caller"

// Handler is the streamable-HTTP endpoint: every request must carry
// "Authorization: Bearer <token>" with a stored, unrevoked token, checked
// on each request (a token revoked mid-session is refused on its next
// call); anything else is answered 401 before the core sees a call.
// Sessions are the SDK's, in this process's memory (so that a client's
// cancellation reaches the call it cancels); what a call waits on is in
// the database, so behind several `silas serve` a session needs a sticky
// route, nothing more.
func Handler(gate Gate, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	srv := NewServer(gate, httpCaller, log)
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, &sdk.StreamableHTTPOptions{Logger: log})
	verify := func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		c, err := gate.Authenticate(ctx, token)
		if errors.Is(err, callgate.ErrUnauthorized) {
			log.Info("mcp: refused a request with an unknown or revoked token")
			return nil, auth.ErrInvalidToken
		}
		if err != nil {
			log.Error("mcp: could not check a token", slog.Any("err", err))
			return nil, errors.New("could not check the token")
		}
		return &auth.TokenInfo{UserID: string(c.Identity()), Extra: map[string]any{callerKey: c}}, nil
	}
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A call waits for a person (minutes): http.write_timeout must not
		// cut its stream. Authenticated requests only.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		h.ServeHTTP(w, r)
	})
	return auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(inner)
}

// httpCaller is the caller Handler's bearer check found.
func httpCaller(req *sdk.CallToolRequest) (callgate.Caller, bool) {
	if req.Extra == nil || req.Extra.TokenInfo == nil {
		return callgate.Caller{}, false
	}
	c, ok := req.Extra.TokenInfo.Extra[callerKey].(callgate.Caller)
	return c, ok && c.Identity() != ""
}
