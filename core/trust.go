package core

// Trust is the trust tag the core computes for a turn from evidence and
// identity bindings. Message text and the agent never influence it.
type Trust string

const (
	// TrustOwner: a platform identity bound to the owner (config-declared or
	// by a signed pairing record), on an authenticated request.
	TrustOwner Trust = "owner"
	// TrustAuth: an allowlisted or paired identity on an authenticated request.
	TrustAuth Trust = "auth"
	// TrustExternal: everything else. External turns can never propose an
	// executable action.
	TrustExternal Trust = "external"
)
