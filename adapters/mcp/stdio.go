package mcp

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/silas-gateway/silas/core"
)

// Stdio serves the tools over in/out for an agent on this machine (`silas
// mcp serve`) by forwarding every call to the gateway's endpoint with a
// bearer token: the caller is that token's "mcp:<name>", exactly as over
// HTTP, and the running gateway does everything (cards, taps, runs). It
// mirrors the endpoint's tools and relays its progress notifications. It
// returns when the agent closes in, or ctx ends.
func Stdio(ctx context.Context, endpoint, token string, in io.ReadCloser, out io.WriteCloser, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	var mu sync.Mutex
	relays := map[string]func(msg string, n float64){}
	client := sdk.NewClient(&sdk.Implementation{Name: "silas-mcp-bridge", Version: "1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
			id, _ := r.Params.ProgressToken.(string)
			mu.Lock()
			f := relays[id]
			mu.Unlock()
			if f != nil {
				f(r.Params.Message, r.Params.Progress)
			}
		},
	})
	hc := &http.Client{Transport: bearer{token: token, next: http.DefaultTransport}}
	cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		return fmt.Errorf("mcp: connect to %s (is `silas serve` running, and the token valid?): %w", endpoint, err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		return fmt.Errorf("mcp: list the gateway's tools: %w", err)
	}
	srv := sdk.NewServer(Implementation, nil)
	for _, t := range tools.Tools {
		srv.AddTool(t, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			p := &sdk.CallToolParams{Name: req.Params.Name, Arguments: req.Params.Arguments}
			if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
				id := core.NewID()
				mu.Lock()
				relays[id] = func(msg string, n float64) {
					_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: tok, Message: msg, Progress: n})
				}
				mu.Unlock()
				defer func() { mu.Lock(); delete(relays, id); mu.Unlock() }()
				p.SetProgressToken(id)
			}
			return cs.CallTool(ctx, p)
		})
	}
	log.Info("mcp: serving the gateway's tools on stdio", slog.String("endpoint", endpoint), slog.Int("tools", len(tools.Tools)))
	err = srv.Run(ctx, &sdk.IOTransport{Reader: in, Writer: out})
	if err != nil && ctx.Err() == nil && err != io.EOF {
		return fmt.Errorf("mcp: stdio: %w", err)
	}
	return nil
}

// bearer adds the token to every request to the gateway.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}
