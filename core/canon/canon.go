// Package canon produces RFC 8785 (JSON Canonicalization Scheme) bytes, the
// only form Silas hashes or signs.
//
// Transform is strict: it rejects anything that is not a single, well-formed
// I-JSON document, because a hash over an ambiguous document is worthless.
// In particular it rejects
//
//   - syntax errors, trailing content after the top-level value ("{}x",
//     "{}{}"), a byte-order mark, comments, and literals such as NaN;
//   - duplicate property names in any object, compared after unescaping
//     (so {"a":1,"\u0061":2} is a duplicate), as RFC 8785 section 3.1 requires;
//   - invalid UTF-8 and ill-formed \u surrogate escapes;
//   - numbers whose magnitude overflows an IEEE-754 double (1e400).
//
// Numbers are otherwise read as IEEE-754 doubles, exactly as RFC 8785 does, so
// precision beyond a double is not preserved: 9007199254740993 becomes
// 9007199254740992, 4.50 becomes 4.5, -0 becomes 0, and a magnitude below the
// smallest subnormal (1e-400) rounds to 0. Callers that show a document to a
// person should show its canonical form, which is what the hash covers.
package canon

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gowebpki/jcs"
)

// errInvalid is returned for input encoding/json does not accept as JSON.
var errInvalid = errors.New("canon: invalid JSON")

// Transform returns the canonical form of a JSON document. It never panics;
// every malformed input yields an error.
func Transform(doc []byte) (out []byte, err error) {
	// jcs does not panic on any input we know of (the fuzz target checks
	// this), but a panic in a dependency must not take the gateway down or
	// be mistaken for success.
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("canon: internal error: %v", r)
		}
	}()
	if out, ok := transformDirect(doc); ok {
		return out, nil
	}
	return transformGeneral(doc)
}

// transformGeneral is Transform through encoding/json and jcs: the path for
// every document the direct path gives up on, and the reference it is
// checked against.
func transformGeneral(doc []byte) (out []byte, err error) {
	// Two independent parsers must both accept the document. jcs is the
	// canonicalizer; encoding/json is what the rest of the gateway decodes
	// with, so requiring it to agree keeps a parser differential from
	// turning into "hashed one thing, executed another".
	if !json.Valid(doc) {
		return nil, errInvalid
	}
	out, err = jcs.Transform(doc)
	if err != nil {
		return nil, fmt.Errorf("canon: %w", err)
	}
	return out, nil
}

// Hash returns the SHA-256 of the canonical form of doc: the value approval
// tokens are bound to. On error the returned hash is all zeros.
func Hash(doc []byte) ([32]byte, error) {
	c, err := Transform(doc)
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(c), nil
}
