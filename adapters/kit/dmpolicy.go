package kit

import "fmt"

// DM policies (<platform>.dm_policy): what direct messages from unknown
// senders get. The core applies them; adapters only check the value.
const (
	DMPairing   = "pairing"
	DMAllowlist = "allowlist"
	DMOpen      = "open"
	DMDisabled  = "disabled"
)

// CheckDMPolicy checks a <platform>.dm_policy value, naming key.
func CheckDMPolicy(key, v string) error {
	switch v {
	case DMPairing, DMAllowlist, DMOpen, DMDisabled:
		return nil
	}
	return fmt.Errorf("%s: %q is not pairing, allowlist, open or disabled", key, v)
}
