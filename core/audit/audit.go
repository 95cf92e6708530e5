// Package audit defines the hash-chained audit log: the entry shape, how an
// entry is hashed, and how a chain is checked. Storage lives in core/store;
// this package is pure so the hashing rules are in one place.
//
// hash(n) = sha256(hash(n-1) ‖ canonical(entry n)), where canonical is RFC
// 8785 JSON of {seq, at, kind, actor, conversation, data}. The first entry's
// previous hash is 32 zero bytes. Sequence numbers are contiguous, so a
// deleted row breaks the chain as surely as an edited one.
//
// The chain alone cannot tell a forged history from a real one: whoever can
// write to the database can recompute every hash. Signed checkpoints
// (checkpoint.go) anchor it with a key the database never sees, and a head
// file outside the database (files.go) keeps the latest one; Check
// (report.go) compares all three. files.go is the only part that touches
// the disk.
//
// Entries carry names and ids, never secret values.
package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/silas-gateway/silas/core/canon"
)

// Entry is one audit record before it is chained.
type Entry struct {
	Kind         Kind           `json:"kind"`
	Actor        string         `json:"actor"`
	Conversation string         `json:"conversation"`
	Data         map[string]any `json:"data"`
}

// Row is a chained entry as stored.
type Row struct {
	Seq      int64
	At       time.Time
	Entry    Entry
	DataJSON []byte // the stored JSON of Data, as read back
	PrevHash []byte
	Hash     []byte
	// MAC is the entry MAC (mac.go); nil for a row written without one.
	MAC []byte
}

// Genesis is the previous hash of the first entry.
var Genesis = make([]byte, sha256.Size)

// TimeFormat is the timestamp form that is hashed. PostgreSQL keeps
// microseconds, so nothing finer is hashed.
const TimeFormat = "2006-01-02T15:04:05.000000Z"

// Truncate rounds t to what the database stores.
func Truncate(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// Canonical returns the bytes hashed for an entry. dataJSON is the JSON of
// the entry's data (nil means "{}").
func Canonical(seq int64, at time.Time, kind Kind, actor, conversation string, dataJSON []byte) ([]byte, error) {
	if len(dataJSON) == 0 {
		dataJSON = []byte("{}")
	}
	// Written directly around the data's canonical form: this runs at
	// every execution's gate (its decision's entry) and for every entry a
	// chain check reads. Equal to canonicalGeneral (FuzzCanonicalDirect).
	if seq <= maxExactInt && seq >= -maxExactInt {
		if data, err := canon.Transform(dataJSON); err == nil {
			b := make([]byte, 0, len(data)+len(kind)+len(actor)+len(conversation)+96)
			b = append(b, `{"actor":`...)
			b = canon.AppendString(b, actor)
			b = append(b, `,"at":"`...)
			b = Truncate(at).AppendFormat(b, TimeFormat)
			b = append(b, `","conversation":`...)
			b = canon.AppendString(b, conversation)
			b = append(b, `,"data":`...)
			b = append(b, data...)
			b = append(b, `,"kind":`...)
			b = canon.AppendString(b, string(kind))
			b = append(b, `,"seq":`...)
			b = strconv.AppendInt(b, seq, 10)
			return append(b, '}'), nil
		}
	}
	return canonicalGeneral(seq, at, kind, actor, conversation, dataJSON)
}

// canonicalGeneral is Canonical through encoding/json and canon.Transform:
// for a seq beyond 2^53 and data the direct path cannot read (which it
// then reports as before).
func canonicalGeneral(seq int64, at time.Time, kind Kind, actor, conversation string, dataJSON []byte) ([]byte, error) {
	doc := struct {
		Seq          int64           `json:"seq"`
		At           string          `json:"at"`
		Kind         string          `json:"kind"`
		Actor        string          `json:"actor"`
		Conversation string          `json:"conversation"`
		Data         json.RawMessage `json:"data"`
	}{seq, Truncate(at).Format(TimeFormat), string(kind), actor, conversation, dataJSON}
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("audit: marshal entry: %w", err)
	}
	return canon.Transform(raw)
}

// Chain computes the hash of an entry given the previous hash.
func Chain(prev, canonicalEntry []byte) []byte {
	h := sha256.New()
	h.Write(prev)
	h.Write(canonicalEntry)
	return h.Sum(nil)
}

// MarshalData returns the JSON of an entry's data.
func MarshalData(d map[string]any) ([]byte, error) {
	if d == nil {
		return []byte("{}"), nil
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("audit: marshal data: %w", err)
	}
	return b, nil
}

// BrokenError names the first row whose hash does not match.
type BrokenError struct {
	Seq    int64
	Reason string
}

func (e *BrokenError) Error() string {
	return fmt.Sprintf("audit chain broken at seq %d: %s", e.Seq, e.Reason)
}

// Verifier checks rows in sequence order, one at a time, so a chain of any
// length is checked in constant memory.
type Verifier struct {
	prev    []byte
	nextSeq int64
	Checked int64
}

// NewVerifier starts at the genesis entry (seq 1).
func NewVerifier() *Verifier { return &Verifier{prev: Genesis, nextSeq: 1} }

// Check verifies the next row; it returns a *BrokenError on the first mismatch.
func (v *Verifier) Check(r Row) error {
	if r.Seq != v.nextSeq {
		return &BrokenError{Seq: v.nextSeq, Reason: fmt.Sprintf("row missing (next row found is seq %d)", r.Seq)}
	}
	if !bytes.Equal(r.PrevHash, v.prev) {
		return &BrokenError{Seq: r.Seq, Reason: "prev_hash does not match the hash of the row before"}
	}
	c, err := Canonical(r.Seq, r.At, r.Entry.Kind, r.Entry.Actor, r.Entry.Conversation, r.DataJSON)
	if err != nil {
		return &BrokenError{Seq: r.Seq, Reason: err.Error()}
	}
	want := Chain(v.prev, c)
	if !bytes.Equal(want, r.Hash) {
		return &BrokenError{Seq: r.Seq, Reason: fmt.Sprintf("hash mismatch: stored %s, computed %s", short(r.Hash), short(want))}
	}
	v.prev = r.Hash
	v.nextSeq++
	v.Checked++
	return nil
}

func short(b []byte) string {
	s := hex.EncodeToString(b)
	if len(s) > 16 {
		return s[:16]
	}
	return s
}

// Prepared is an entry canonicalised up to its sequence number. "seq" sorts
// last among the entry's keys in RFC 8785 order, so the canonical bytes are
// the prefix, the decimal seq and "}". Preparing outside the chain lock
// keeps the serial part of an append to hashing.
type Prepared struct {
	At       time.Time
	Entry    Entry
	DataJSON []byte
	prefix   []byte
}

// Prepare canonicalises everything but the seq.
func Prepare(at time.Time, e Entry) (Prepared, error) {
	ts := Truncate(at).Format(TimeFormat)
	if data, prefix, ok := prepareFast(ts, e); ok {
		return Prepared{At: Truncate(at), Entry: e, DataJSON: data, prefix: prefix}, nil
	}
	return prepareGeneral(at, e)
}

// prepareGeneral is Prepare through encoding/json and canon.Transform: for
// any data, at the cost of a marshal and a re-parse.
func prepareGeneral(at time.Time, e Entry) (Prepared, error) {
	data, err := MarshalData(e.Data)
	if err != nil {
		return Prepared{}, err
	}
	doc := struct {
		At           string          `json:"at"`
		Kind         string          `json:"kind"`
		Actor        string          `json:"actor"`
		Conversation string          `json:"conversation"`
		Data         json.RawMessage `json:"data"`
	}{Truncate(at).Format(TimeFormat), string(e.Kind), e.Actor, e.Conversation, data}
	raw, err := json.Marshal(doc)
	if err != nil {
		return Prepared{}, fmt.Errorf("audit: marshal entry: %w", err)
	}
	c, err := canon.Transform(raw)
	if err != nil {
		return Prepared{}, err
	}
	// c ends with "}"; the seq member goes right before it.
	prefix := append(c[:len(c)-1:len(c)-1], []byte(`,"seq":`)...)
	return Prepared{At: Truncate(at), Entry: e, DataJSON: data, prefix: prefix}, nil
}

// Canonical returns the canonical bytes for seq; equal to Canonical(seq, …).
func (p Prepared) Canonical(seq int64) []byte {
	b := make([]byte, 0, len(p.prefix)+21)
	b = append(b, p.prefix...)
	b = strconv.AppendInt(b, seq, 10)
	return append(b, '}')
}
