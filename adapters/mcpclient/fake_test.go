package mcpclient_test

import (
	"context"
	"encoding/json"
	"net"
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

// transport connects the client to a fresh server session over an
// in-memory pipe; kill ends the newest one from the server's side.
func (f *fake) transport(ctx context.Context) (func(string) (sdk.Transport, error), func()) {
	var mu sync.Mutex
	var last *sdk.ServerSession
	var lastPipe net.Conn
	connect := func(string) (sdk.Transport, error) {
		// sdk.NewInMemoryTransports, but keeping the server's end of the
		// pipe, which kill closes.
		cp, sp := net.Pipe()
		ss, err := f.srv.Connect(ctx, &sdk.IOTransport{Reader: sp, Writer: sp}, nil)
		if err != nil {
			return nil, err
		}
		f.conns.Add(1)
		mu.Lock()
		last, lastPipe = ss, sp
		mu.Unlock()
		return &sdk.IOTransport{Reader: cp, Writer: cp}, nil
	}
	kill := func() {
		mu.Lock()
		ss, sp := last, lastPipe
		mu.Unlock()
		if ss == nil {
			return
		}
		// The server ends the session the way a server process does when it
		// exits: its end of the pipe closes. Not ss.Close: in go-sdk v1.8.0
		// that can wait forever. The client opens a subscriptions/listen
		// with each session (mcp/client.go:354-356); the server's handler
		// releases the request queue (jsonrpc2.Async, mcp/server.go:2003-2005)
		// before it records its ID in ss.listenIDs (server.go:2019-2022),
		// so the tools/list sent after it can be answered first. A Close that
		// snapshots listenIDs (server.go:2150-2156) before the record
		// cancels nothing, and conn.Close (internal/jsonrpc2/conn.go:504-508)
		// waits for in-flight requests, while the listen parks on ctx.Done
		// (server.go:1315) until the peer cancels it or the pipe breaks —
		// which Close only does once they are done. A closed pipe ends the
		// reader, which cancels every incoming request, recorded or not
		// (conn.go:541-561).
		_ = sp.Close()
		done := make(chan struct{})
		go func() { _ = ss.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			// Bounded, so a stuck session fails the test that needs it
			// instead of hanging the whole run.
			panic("mcpclient fake: the server session did not end within 10s of its pipe closing")
		}
	}
	return connect, kill
}

// serveStdio runs the fake on standard input and output.
func serveStdio() {
	f := newFake(nil)
	_ = f.srv.Run(context.Background(), &sdk.StdioTransport{})
}
