// Command mcpfake is a fake MCP server for tests, built with the official
// SDK and spoken to over stdio: a read tool (annotated read-only) and a
// delete tool (no annotations) that deletes nothing and says what it
// would have deleted. The binary end-to-end tests configure it in
// mcp.servers, where Silas runs it inside its sandbox.
//
// mcpfake is never used in production.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	srv := mcp.NewServer(&mcp.Implementation{Name: "mcpfake", Version: "1"}, nil)
	schema := map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}, "required": []string{"path"}}
	srv.AddTool(&mcp.Tool{Name: "read", Description: "Read a file.", InputSchema: schema, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, handle)
	srv.AddTool(&mcp.Tool{Name: "delete", Description: "Delete a file.", InputSchema: schema}, handle)
	if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "mcpfake:", err)
		os.Exit(1)
	}
}

func handle(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var a struct {
		Path string `json:"path"`
	}
	_ = json.Unmarshal(req.Params.Arguments, &a)
	if req.Params.Name == "delete" {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deleted " + a.Path}}}, nil
	}
	b, err := os.ReadFile(a.Path)
	if err != nil {
		r := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "cannot read: " + err.Error()}}}
		r.IsError = true
		return r, nil
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil
}
