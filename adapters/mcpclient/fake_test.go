package mcpclient_test

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// envFake makes the test binary the fake MCP server on its standard
// input and output (the stdio test runs it in the sandbox).
const envFake = "SILAS_TEST_FAKE_MCP"

// fake is an MCP server built with the SDK: a read tool (annotated
// read-only) and a delete tool (no annotations). It records each
// tools/call, and what seen says at that moment (the test's look at the
// audit log).
type fake struct {
	srv   *sdk.Server
	seen  func() int
	mu    sync.Mutex
	calls []call
	conns atomic.Int32
}

type call struct {
	tool string
	args string
	// consumed is the number of token.consumed audit entries when the
	// call reached the server.
	consumed int
}

func schema(props ...string) map[string]any {
	p := map[string]any{}
	for _, n := range props {
		p[n] = map[string]any{"type": "string"}
	}
	return map[string]any{"type": "object", "properties": p, "required": props}
}

func newFake(seen func() int) *fake {
	f := &fake{seen: seen, srv: sdk.NewServer(&sdk.Implementation{Name: "fake-files", Version: "1"}, nil)}
	f.srv.AddTool(&sdk.Tool{Name: "read", Description: "Read a file.", InputSchema: schema("path"),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, f.handle)
	f.setDelete("Delete a file.")
	return f
}

// setDelete (re)defines the delete tool with description d: a changed
// definition, announced with tools/list_changed by the SDK.
func (f *fake) setDelete(d string) {
	f.srv.AddTool(&sdk.Tool{Name: "delete", Description: d, InputSchema: schema("path")}, f.handle)
}

func (f *fake) handle(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	n := 0
	if f.seen != nil {
		n = f.seen()
	}
	f.mu.Lock()
	f.calls = append(f.calls, call{tool: req.Params.Name, args: string(req.Params.Arguments), consumed: n})
	f.mu.Unlock()
	var a struct {
		Path string `json:"path"`
	}
	_ = json.Unmarshal(req.Params.Arguments, &a)
	if req.Params.Name == "delete" {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "deleted " + a.Path}}}, nil
	}
	b, err := os.ReadFile(a.Path)
	if err != nil {
		r := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "cannot read: " + err.Error()}}}
		r.IsError = true
		return r, nil
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(b)}}}, nil
}

func (f *fake) callsOf(tool string) []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []call
	for _, c := range f.calls {
		if c.tool == tool {
			out = append(out, c)
		}
	}
	return out
}

// transport connects the client to a fresh server session (in memory);
// kill ends the newest one from the server's side.
func (f *fake) transport(ctx context.Context) (func(string) (sdk.Transport, error), func()) {
	var mu sync.Mutex
	var last *sdk.ServerSession
	connect := func(string) (sdk.Transport, error) {
		ct, st := sdk.NewInMemoryTransports()
		ss, err := f.srv.Connect(ctx, st, nil)
		if err != nil {
			return nil, err
		}
		f.conns.Add(1)
		mu.Lock()
		last = ss
		mu.Unlock()
		return ct, nil
	}
	kill := func() {
		mu.Lock()
		ss := last
		mu.Unlock()
		if ss == nil {
			return
		}
		// The SDK's ServerSession.Close waits for the connection's
		// goroutines and once hung for the whole suite's timeout (go-sdk
		// v1.8.0, in-memory transport): bounded here, so a stuck close
		// fails the test that needs it instead of the whole run.
		done := make(chan struct{})
		go func() { ss.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			panic("mcpclient fake: the server session did not close within 10s")
		}
	}
	return connect, kill
}

// serveStdio runs the fake on standard input and output.
func serveStdio() {
	f := newFake(nil)
	_ = f.srv.Run(context.Background(), &sdk.StdioTransport{})
}
