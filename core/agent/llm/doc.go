// Package llm is the model side of Silas's LLM agent (issue 14): a client
// for any OpenAI-compatible chat-completions endpoint (OpenAI, OpenRouter,
// vLLM, Ollama, llama.cpp) with tool calling, the proxy → planner →
// executor roles and their prompts, the tool set whose calls become
// core.Action proposals, the one-step agent behind `agent.kind: llm`, and
// the endpoint checks of `silas doctor`.
//
// What this package must never do: decide trust, approval or "done". A tool
// call the model makes is only ever a proposal — the runtime canonicalises
// and hashes it itself, the risk policy decides, a person taps, the sandbox
// runs it and core/verify judges it. The model sees secret names, never
// values, and no approval state. The API key is never logged or put into an
// error.
//
// Subpackages: plan (the planner's markdown plans with YAML front matter),
// task (budgets, the retry → consult planner → re-plan → escalate machine,
// eviction of long tool output), llmtest (a local fake endpoint for tests).
package llm
