package core

import (
	"encoding/json"
	"time"
)

// MCPToolStatus is where a tool of an MCP server Silas calls stands with
// the owner.
type MCPToolStatus string

const (
	// MCPToolPending: seen, never pinned; calls are refused.
	MCPToolPending MCPToolStatus = "pending"
	// MCPToolPinned: the server lists the definition the owner pinned.
	MCPToolPinned MCPToolStatus = "pinned"
	// MCPToolQuarantined: the server lists a definition other than the
	// pinned one; calls are refused until the owner pins it again.
	MCPToolQuarantined MCPToolStatus = "quarantined"
)

// MCPTool is one tool of a configured MCP server, as last seen.
type MCPTool struct {
	Server string
	Name   string
	// Definition is the RFC 8785 form of the tool as the server listed it
	// (name, description, input schema, annotations…).
	Definition json.RawMessage
	// Hash is the hex sha256 of Definition; PinnedHash that of the
	// definition the owner pinned ("" never).
	Hash       string
	PinnedHash string
	Status     MCPToolStatus
	// Card is the pin card open for it ("" none).
	Card     string
	SeenAt   time.Time
	PinnedAt time.Time
	PinnedBy IdentityID
	// PinSig is the gateway key's Ed25519 signature over the pin
	// (core/mcptools); a pin without a valid one is no pin.
	PinSig []byte
}

// MCPPinned names one definition a pin card showed.
type MCPPinned struct {
	Name string `json:"name"`
	Hash string `json:"hash"`
}

// MCPPinCard is a card asking the owner to pin tools of one server.
type MCPPinCard struct {
	ID           string
	Server       string
	Channel      ChannelName
	Conversation ConversationID
	Tools        []MCPPinned
	// Status: pending, pinned, declined, expired.
	Status    string
	DecidedBy IdentityID
	CreatedAt time.Time
	ExpiresAt time.Time
}
