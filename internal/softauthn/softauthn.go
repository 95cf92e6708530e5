// Package softauthn is a software WebAuthn authenticator for tests: it
// answers the options a relying party hands the browser
// (PublicKeyCredentialCreationOptions / RequestOptions, as JSON) with the
// PublicKeyCredential JSON a browser would post back, signed with an ECDSA
// P-256 key in the WebAuthn format (authenticatorData ‖
// SHA-256(clientDataJSON)), attestation "none".
//
// It exists so tests can produce real assertions without a browser, and
// bend them on purpose (no user verification, a counter going backwards, a
// replayed answer). It must never be used outside tests.
package softauthn

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-webauthn/webauthn/protocol/webauthncbor"
)

// Authenticator is one credential on a software authenticator.
type Authenticator struct {
	// Origin is what the "browser" puts in clientDataJSON.
	Origin string
	// Counter is the signature counter: bumped before each assertion
	// unless FreezeCounter; set it to replay an older count.
	Counter       uint32
	FreezeCounter bool
	// NoUV clears the user-verified flag (a tap without PIN or biometric).
	NoUV bool

	key        *ecdsa.PrivateKey
	id         []byte
	userHandle []byte
}

// New makes an authenticator with a fresh P-256 key and credential id.
func New(origin string) (*Authenticator, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	id := make([]byte, 32)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	return &Authenticator{Origin: origin, key: k, id: id}, nil
}

// ID is the credential id.
func (a *Authenticator) ID() []byte { return a.id }

var b64 = base64.RawURLEncoding

type options struct {
	Challenge string `json:"challenge"`
	RPID      string `json:"rpId"`
	RP        struct {
		ID string `json:"id"`
	} `json:"rp"`
	User struct {
		ID string `json:"id"`
	} `json:"user"`
}

func parse(opts []byte) (options, []byte, error) {
	var o options
	if err := json.Unmarshal(opts, &o); err != nil {
		return o, nil, fmt.Errorf("softauthn: options: %w", err)
	}
	ch, err := b64.DecodeString(o.Challenge)
	if err != nil || len(ch) == 0 {
		return o, nil, errors.New("softauthn: options carry no challenge")
	}
	return o, ch, nil
}

func (a *Authenticator) clientData(typ string, challenge []byte) []byte {
	b, _ := json.Marshal(map[string]any{"type": typ, "challenge": b64.EncodeToString(challenge), "origin": a.Origin, "crossOrigin": false})
	return b
}

func (a *Authenticator) flags(attested bool) byte {
	f := byte(0x01) // UP
	if !a.NoUV {
		f |= 0x04 // UV
	}
	if attested {
		f |= 0x40 // AT
	}
	return f
}

func authData(rpID string, flags byte, counter uint32, rest []byte) []byte {
	h := sha256.Sum256([]byte(rpID))
	out := append([]byte(nil), h[:]...)
	out = append(out, flags)
	out = binary.BigEndian.AppendUint32(out, counter)
	return append(out, rest...)
}

// Register answers creation options (the JSON of
// PublicKeyCredentialCreationOptions) with the PublicKeyCredential JSON.
func (a *Authenticator) Register(opts []byte) ([]byte, error) {
	o, ch, err := parse(opts)
	if err != nil {
		return nil, err
	}
	if a.userHandle, err = b64.DecodeString(o.User.ID); err != nil {
		return nil, fmt.Errorf("softauthn: user id: %w", err)
	}
	x, y := a.key.X.FillBytes(make([]byte, 32)), a.key.Y.FillBytes(make([]byte, 32))
	cose, err := webauthncbor.Marshal(map[int]any{1: 2, 3: -7, -1: 1, -2: x, -3: y})
	if err != nil {
		return nil, err
	}
	att := make([]byte, 16) // AAGUID: zero
	att = binary.BigEndian.AppendUint16(att, uint16(len(a.id)))
	att = append(att, a.id...)
	att = append(att, cose...)
	ad := authData(o.RP.ID, a.flags(true), a.Counter, att)
	obj, err := webauthncbor.Marshal(map[string]any{"fmt": "none", "attStmt": map[string]any{}, "authData": ad})
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{
		"id": b64.EncodeToString(a.id), "rawId": b64.EncodeToString(a.id), "type": "public-key",
		"response": map[string]any{
			"clientDataJSON":    b64.EncodeToString(a.clientData("webauthn.create", ch)),
			"attestationObject": b64.EncodeToString(obj),
			"transports":        []string{"internal"},
		},
		"clientExtensionResults": map[string]any{},
	})
}

// Assert answers request options (the JSON of
// PublicKeyCredentialRequestOptions) with the PublicKeyCredential JSON.
func (a *Authenticator) Assert(opts []byte) ([]byte, error) {
	o, ch, err := parse(opts)
	if err != nil {
		return nil, err
	}
	return a.AssertChallenge(o.RPID, ch)
}

// AssertChallenge signs an assertion over challenge for rpID, whatever a
// relying party asked (a test forging an answer for another challenge).
func (a *Authenticator) AssertChallenge(rpID string, challenge []byte) ([]byte, error) {
	if !a.FreezeCounter {
		a.Counter++
	}
	ad := authData(rpID, a.flags(false), a.Counter, nil)
	cd := a.clientData("webauthn.get", challenge)
	h := sha256.Sum256(cd)
	digest := sha256.Sum256(append(append([]byte(nil), ad...), h[:]...))
	sig, err := ecdsa.SignASN1(rand.Reader, a.key, digest[:])
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{
		"id": b64.EncodeToString(a.id), "rawId": b64.EncodeToString(a.id), "type": "public-key",
		"response": map[string]any{
			"clientDataJSON":    b64.EncodeToString(cd),
			"authenticatorData": b64.EncodeToString(ad),
			"signature":         b64.EncodeToString(sig),
			"userHandle":        b64.EncodeToString(a.userHandle),
		},
		"clientExtensionResults": map[string]any{},
	})
}
