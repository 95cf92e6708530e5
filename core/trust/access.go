package trust

import "crypto/rand"

// AccessPolicy decides what happens to direct messages from senders
// without trust (external). Group messages are gated by the adapter.
type AccessPolicy string

const (
	// AccessOpen: anyone may talk; external trust still cannot run actions.
	AccessOpen AccessPolicy = "open"
	// AccessPairing: an unknown sender gets a request code and an owner
	// gets a card "Allow <name> to talk to Silas? [Allow] [Deny]".
	AccessPairing AccessPolicy = "pairing"
	// AccessAllowlist: only owners and allowed or paired identities are
	// answered; others are ignored (and audited).
	AccessAllowlist AccessPolicy = "allowlist"
	// AccessDisabled: only owners are answered in direct chats.
	AccessDisabled AccessPolicy = "disabled"
)

// Valid reports whether p is one of the four policies.
func (p AccessPolicy) Valid() bool {
	switch p {
	case AccessOpen, AccessPairing, AccessAllowlist, AccessDisabled:
		return true
	}
	return false
}

const accessAlphabet = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"

// NewAccessCode is the code a stranger's access request is shown with (six
// characters without look-alikes, so it can be read out).
func NewAccessCode() string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	for i := range b {
		b[i] = accessAlphabet[int(b[i])%len(accessAlphabet)]
	}
	return string(b)
}
