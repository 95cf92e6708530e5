// Package mcp is Silas as an MCP server (docs/mcp.md): the approval gate
// for other agents — Claude Code, Codex, a script — over the official Go
// SDK (github.com/modelcontextprotocol/go-sdk). It offers three tools,
// run_command, ask and request_approval, on a streamable-HTTP endpoint of
// the gateway (Handler, behind a bearer token `silas mcp token add`
// minted) and on stdio (Stdio: a bridge for an agent on the same machine
// that forwards to that endpoint with the same kind of token). Each call
// is handed to the core's callers gate (core/callgate), which makes it an
// ordinary proposal from "mcp:<token name>" and waits for the owner; this
// package reports MCP progress notifications while it waits and returns
// the outcome.
//
// The SDK stays in this package. It must never decide, approve, run or
// verify anything, never let a request without a valid, unrevoked token
// reach the core, and never log a token.
package mcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/silas-gateway/silas/core/callgate"
	"github.com/silas-gateway/silas/core/verify"
)

// Gate is the core as the tools use it (core/callgate's Gate).
type Gate interface {
	Authenticate(ctx context.Context, token string) (callgate.Caller, error)
	Run(ctx context.Context, c callgate.Caller, r callgate.RunRequest, progress func(string)) (callgate.RunResult, error)
	Ask(ctx context.Context, c callgate.Caller, text, details string, choices []string, progress func(string)) (callgate.Answer, error)
	RequestApproval(ctx context.Context, c callgate.Caller, action, details string, progress func(string)) (callgate.Decision, error)
}

var _ Gate = (*callgate.Gate)(nil)

// Implementation names the server to clients.
var Implementation = &sdk.Implementation{Name: "silas", Title: "Silas approval gate", Version: "1"}

// RunInput is run_command's arguments.
type RunInput struct {
	Argv    []string       `json:"argv" jsonschema:"the program and its arguments, run exactly as given without a shell, in Silas's sandbox"`
	Secrets []string       `json:"secrets,omitempty" jsonschema:"names of secrets stored in Silas that the command receives as environment variables; you never see their values, nor the output of a command that received one"`
	Verify  []verify.Check `json:"verify,omitempty" jsonschema:"checks that decide whether the command worked (default: exit code 0); only these mark it verified"`
	Timeout int            `json:"timeout_seconds,omitempty" jsonschema:"upper bound on the run in seconds (default: the gateway's)"`
	Why     string         `json:"why,omitempty" jsonschema:"one sentence for the person who approves: why you need this"`
}

// AskInput is ask's arguments.
type AskInput struct {
	Question string   `json:"question" jsonschema:"the question for the person"`
	Choices  []string `json:"choices" jsonschema:"1 to 5 answers the person can tap"`
	Details  string   `json:"details,omitempty" jsonschema:"optional longer context shown under the question"`
}

// ApprovalInput is request_approval's arguments.
type ApprovalInput struct {
	Action  string `json:"action" jsonschema:"what you will do yourself if the person approves, in one line"`
	Details string `json:"details,omitempty" jsonschema:"optional details: files, commands, consequences"`
}

// callerOf finds who made a request (set by Handler's bearer check or
// Stdio's bridge); none: the request never passed it.
type callerOf func(req *sdk.CallToolRequest) (callgate.Caller, bool)

// NewServer is the MCP server with the three tools on gate.
func NewServer(gate Gate, who callerOf, log *slog.Logger) *sdk.Server {
	s := sdk.NewServer(Implementation, &sdk.ServerOptions{
		Instructions: "Silas asks a person before anything happens. Every tool call waits (minutes, with progress notifications) " +
			"until the person taps on their phone or in the web chat, declines, or the card expires.",
	})
	caller := func(req *sdk.CallToolRequest) (callgate.Caller, error) {
		c, ok := who(req)
		if !ok {
			return callgate.Caller{}, errors.New("not authenticated")
		}
		return c, nil
	}
	sdk.AddTool(s, &sdk.Tool{Name: "run_command", Title: "Run a command after the person approves",
		Description: "Propose a command to run in Silas's sandbox. The person gets an approval card on their phone or web chat; " +
			"this call blocks until they approve (the command then runs and is verified), decline, or the card expires. " +
			"Returns the verified outcome and the output.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(true)}},
		func(ctx context.Context, req *sdk.CallToolRequest, in RunInput) (*sdk.CallToolResult, callgate.RunResult, error) {
			c, err := caller(req)
			if err != nil {
				return nil, callgate.RunResult{}, err
			}
			res, err := gate.Run(ctx, c, callgate.RunRequest{Argv: in.Argv, Secrets: in.Secrets, Verify: in.Verify, TimeoutSeconds: in.Timeout, Why: in.Why},
				progress(ctx, req, log))
			if err != nil {
				return nil, callgate.RunResult{}, toolError(log, "run_command", err)
			}
			var r *sdk.CallToolResult
			if !res.Verified {
				// Ran, but not verified: the caller must not take it as done.
				r = &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: runText(res)}}}
			} else {
				r = &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: runText(res)}}}
			}
			return r, res, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "ask", Title: "Ask the person a question",
		Description: "Ask the person a question with 1-5 choices; they get a card with buttons. Blocks until they tap one (returned) or the card expires.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(true)}},
		func(ctx context.Context, req *sdk.CallToolRequest, in AskInput) (*sdk.CallToolResult, callgate.Answer, error) {
			c, err := caller(req)
			if err != nil {
				return nil, callgate.Answer{}, err
			}
			a, err := gate.Ask(ctx, c, in.Question, in.Details, in.Choices, progress(ctx, req, log))
			if err != nil {
				return nil, callgate.Answer{}, toolError(log, "ask", err)
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("%s answered: %s", a.By, a.Choice)}}}, a, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "request_approval", Title: "Ask the person to approve something you will do",
		Description: "Ask the person to approve an action you perform yourself (Silas does not run it). Blocks until they approve or decline " +
			"(returned as a decision signed with the gateway's Ed25519 key) or the card expires (an error).",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(true)}},
		func(ctx context.Context, req *sdk.CallToolRequest, in ApprovalInput) (*sdk.CallToolResult, callgate.Decision, error) {
			c, err := caller(req)
			if err != nil {
				return nil, callgate.Decision{}, err
			}
			d, err := gate.RequestApproval(ctx, c, in.Action, in.Details, progress(ctx, req, log))
			if err != nil {
				return nil, callgate.Decision{}, toolError(log, "request_approval", err)
			}
			word := "DECLINED — do not do it"
			if d.Approved {
				word = "APPROVED"
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("%s by %s.", word, d.By)}}}, d, nil
		})
	return s
}

func ptr[T any](v T) *T { return &v }

// runText is run_command's outcome for a reader.
func runText(r callgate.RunResult) string {
	head := fmt.Sprintf("%s (approved by %s): %s", r.Status, r.DecidedBy, r.Summary)
	if r.Reason != "" {
		head += " — " + r.Reason
	}
	switch {
	case r.Withheld:
		return head + "\nThe command received a secret, so its output is not returned; the owner can show it in the chat."
	case r.OutputRef != "":
		return fmt.Sprintf("%s\nstdout (first part; full output stored as %s):\n%s\nstderr:\n%s", head, r.OutputRef, r.Stdout, r.Stderr)
	}
	return fmt.Sprintf("%s\nexit code %d\nstdout:\n%s\nstderr:\n%s", head, r.ExitCode, r.Stdout, r.Stderr)
}

// toolError is the error a client shows: a refusal's own words; anything
// else (the database…) logged and named only in general.
func toolError(log *slog.Logger, tool string, err error) error {
	var r *callgate.Refusal
	if errors.As(err, &r) {
		return r
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	log.Error("mcp: a tool call failed", slog.String("tool", tool), slog.Any("err", err))
	return errors.New("silas could not complete the call (see its log); nothing was approved on your behalf")
}

// progress sends an MCP progress notification for each wait message,
// when the client asked for them (a progress token on the call).
func progress(ctx context.Context, req *sdk.CallToolRequest, log *slog.Logger) func(string) {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return nil
	}
	n := 0.0
	return func(msg string) {
		n++
		if err := req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token, Message: msg, Progress: n}); err != nil {
			log.Debug("mcp: progress notification not sent", slog.Any("err", err))
		}
	}
}
