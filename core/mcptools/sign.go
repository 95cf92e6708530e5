package mcptools

import (
	"crypto/ed25519"
	"encoding/json"

	"github.com/silas-gateway/silas/core"
)

// pinContext starts every signed pin, so a pin's signature can never be
// taken for the gateway's signature over anything else (a token, a
// decision).
const pinContext = "silas mcp pin v1\n"

// pinPayload is what a pin's signature covers: the tool, the pinned
// definition's hash and who pinned it (JSON, fields in a fixed order).
func pinPayload(server, name, hash string, by core.IdentityID) []byte {
	b, _ := json.Marshal(struct {
		Server string `json:"server"`
		Name   string `json:"name"`
		Hash   string `json:"hash"`
		By     string `json:"by"`
	}{server, name, hash, string(by)})
	return append([]byte(pinContext), b...)
}

// sign signs a pin with the gateway's key (nil without one: nothing can
// be pinned).
func (t *Tools) sign(server, name, hash string, by core.IdentityID) []byte {
	if len(t.cfg.Key) != ed25519.PrivateKeySize {
		return nil
	}
	return ed25519.Sign(t.cfg.Key, pinPayload(server, name, hash, by))
}

// pinValid: m's pin carries the gateway key's signature over exactly its
// server, name, pinned hash and pinner.
func (t *Tools) pinValid(m core.MCPTool) bool {
	if len(t.cfg.Key) != ed25519.PrivateKeySize {
		return false
	}
	return PinSigned(t.cfg.Key.Public().(ed25519.PublicKey), m)
}

// PinSigned reports whether m's pin carries the signature of the gateway
// key pub over exactly its server, name, pinned hash and pinner (silas mcp
// list shows a pin that does not as refused).
func PinSigned(pub ed25519.PublicKey, m core.MCPTool) bool {
	if len(pub) != ed25519.PublicKeySize || len(m.PinSig) != ed25519.SignatureSize || m.PinnedHash == "" {
		return false
	}
	return ed25519.Verify(pub, pinPayload(m.Server, m.Name, m.PinnedHash, m.PinnedBy), m.PinSig)
}

// checked is m as far as its pin holds: a pin whose signature does not
// verify (a row edited in the database, or pinned before pins were
// signed) counts as no pin — the tool is pending, its calls refused, and
// the owner is asked again. ok is false for such a pin.
func (t *Tools) checked(m core.MCPTool) (core.MCPTool, bool) {
	if m.PinnedHash == "" || t.pinValid(m) {
		return m, true
	}
	m.PinnedHash, m.Status = "", core.MCPToolPending
	return m, false
}
