package audit

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
)

// Problem kinds in a Report.
const (
	ProblemBrokenRow          = "broken_row"          // the chain itself: first row that does not hash
	ProblemRechained          = "rechained"           // chain valid, but a checkpoint signed another hash
	ProblemTruncated          = "truncated"           // a checkpoint is newer than the last row
	ProblemBadSignature       = "bad_signature"       // a checkpoint's signature does not verify
	ProblemUnknownKey         = "unknown_key"         // a checkpoint names a key that is not trusted
	ProblemCheckpointsDeleted = "checkpoints_deleted" // the head file has a checkpoint the database lost
	ProblemHeadMismatch       = "head_mismatch"       // head file and database disagree on one checkpoint
	ProblemNoPublicKey        = "no_public_key"       // checkpoints exist but cannot be checked
	ProblemForgedEntry        = "forged_entry"        // a row without a valid entry MAC: not written by this gateway
	ProblemNoHeadFile         = "no_head_file"        // a public key exists but the head file does not
	ProblemEmptyHead          = "empty_head_file"     // a public key exists but the head file holds no checkpoint
	ProblemNoCheckpoints      = "no_checkpoints"      // a public key exists, the log is past the threshold, no checkpoint
)

// maxForgedNamed is how many forged entries a report names one by one;
// the rest are counted.
const maxForgedNamed = 10

// Problem is one finding of a verification; any problem fails it.
type Problem struct {
	Kind    string `json:"kind"`
	Seq     int64  `json:"seq,omitempty"`
	Message string `json:"message"`
}

// Report is the outcome of checking the chain against its checkpoints.
type Report struct {
	// Entries is how many rows verified before the first broken one (all
	// of them when the chain is intact).
	Entries int64 `json:"entries"`
	// LastSeq is the highest seq in the log (0 when empty).
	LastSeq int64 `json:"last_seq"`
	// Checkpoints is how many checkpoints the database holds.
	Checkpoints int `json:"checkpoints"`
	// NewestCheckpoint is the seq of the newest trusted checkpoint, from the
	// database or the head file (0 when none).
	NewestCheckpoint int64 `json:"newest_checkpoint"`
	// HeadSeq is the seq of the newest checkpoint in the head file (0 when
	// none was given or it is empty).
	HeadSeq  int64     `json:"head_seq"`
	Problems []Problem `json:"problems"`
	// Warnings are gaps in what could be checked; they do not fail it.
	Warnings []string `json:"warnings"`

	broken *BrokenError
}

// OK reports whether nothing was found wrong.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// Broken returns the chain break, if the chain itself is broken.
func (r *Report) Broken() *BrokenError { return r.broken }

// Check verifies rows fed in seq order against the chain rules and against
// the checkpoints it was given, in constant memory per row (the checkpoints
// are held: one per thousand entries or so). Only checkpoints whose
// signature verifies with a trusted key count as evidence; the rest are
// reported and ignored.
type Check struct {
	chain *Verifier
	want  map[int64][]byte // trusted checkpoints: seq → signed hash
	seqs  []int64          // their seqs, ascending
	// lastGood is the newest checkpoint seen to match so far.
	lastGood   int64
	firstWrong int64
	wrongAfter int // how many more checkpoints disagree after firstWrong
	chainOK    bool
	report     Report
	// entry MACs: checked from key.FromSeq on when the key is known
	key    *EntryKey
	macer  *MACer
	forged int64
}

// WithEntryKey makes the check verify every row's entry MAC from
// k.FromSeq on (mac.go); a row without a valid one is reported as not
// written by this gateway. nil leaves MACs unchecked.
func (c *Check) WithEntryKey(k *EntryKey) *Check {
	c.key = k
	if k != nil {
		c.macer = k.NewMACer()
	}
	return c
}

// EntryMACProblem says why a row's MAC shows it was not written by the
// gateway that holds k, or ok when it was (or the row predates k).
func EntryMACProblem(m *MACer, k *EntryKey, r Row) (Problem, bool) {
	if !k.Covers(r.Seq) || m.Valid(r.Hash, r.MAC) {
		return Problem{}, true
	}
	why := "its MAC does not verify under the audit entry key"
	if len(r.MAC) == 0 {
		why = "it carries no MAC"
	}
	return Problem{Kind: ProblemForgedEntry, Seq: r.Seq,
		Message: fmt.Sprintf("entry %d was not written by this gateway: %s (kind %q, actor %q)", r.Seq, why, r.Entry.Kind, r.Entry.Actor)}, false
}

// NewCheck prepares a check. trusted are the audit public keys (from a file
// the database cannot change); checkpoints are the database's; head is the
// newest checkpoint of the head file outside the database (nil when there
// is none), named headName in messages; older are the head file's other
// lines, each compared with the log as the newest is (the file is the
// stronger witness for every line it holds).
func NewCheck(trusted []ed25519.PublicKey, checkpoints []Checkpoint, head *Checkpoint, headName string, older ...Checkpoint) *Check {
	c := &Check{chain: NewVerifier(), want: map[int64][]byte{}, chainOK: true}
	r := &c.report
	r.Checkpoints = len(checkpoints)
	if len(trusted) == 0 {
		n := len(checkpoints)
		if head != nil {
			n++
		}
		if n > 0 {
			r.Problems = append(r.Problems, Problem{Kind: ProblemNoPublicKey,
				Message: fmt.Sprintf("%d checkpoint(s) cannot be checked: no audit public key (give --pubkey or set audit.public_key_file)", n)})
		}
		return c
	}
	var newestDB int64
	byseq := map[int64]Checkpoint{}
	for _, cp := range checkpoints {
		if p, ok := signatureProblem(cp, trusted, ""); !ok {
			r.Problems = append(r.Problems, p)
			continue
		}
		c.want[cp.Seq] = cp.Hash
		byseq[cp.Seq] = cp
		newestDB = max(newestDB, cp.Seq)
	}
	if head != nil {
		r.HeadSeq = head.Seq
		if p, ok := signatureProblem(*head, trusted, "head file "+headName+": "); !ok {
			r.Problems = append(r.Problems, p)
		} else {
			if db, ok := byseq[head.Seq]; !ok {
				r.Problems = append(r.Problems, Problem{Kind: ProblemCheckpointsDeleted, Seq: head.Seq,
					Message: fmt.Sprintf("head file %s has a checkpoint at seq %d that the database does not (its newest is at seq %d): checkpoint rows were deleted", headName, head.Seq, newestDB)})
			} else if !db.Same(*head) {
				r.Problems = append(r.Problems, Problem{Kind: ProblemHeadMismatch, Seq: head.Seq,
					Message: fmt.Sprintf("head file %s and the database disagree on the checkpoint at seq %d", headName, head.Seq)})
			}
			// The file is the stronger witness: the database cannot change it.
			c.want[head.Seq] = head.Hash
		}
		for _, cp := range older {
			if cp.Seq >= head.Seq {
				continue // the newest was checked above (or repeats it)
			}
			if p, ok := signatureProblem(cp, trusted, "head file "+headName+": "); !ok {
				r.Problems = append(r.Problems, p)
				continue
			}
			if db, ok := byseq[cp.Seq]; ok && !db.Same(cp) {
				r.Problems = append(r.Problems, Problem{Kind: ProblemHeadMismatch, Seq: cp.Seq,
					Message: fmt.Sprintf("head file %s and the database disagree on the checkpoint at seq %d", headName, cp.Seq)})
			}
			// A missing row for it is not news here (the newest line
			// already says whether checkpoint rows were deleted); the
			// log's row at this seq must still hash as the file says.
			c.want[cp.Seq] = cp.Hash
		}
	}
	for s := range c.want {
		c.seqs = append(c.seqs, s)
	}
	slices.Sort(c.seqs)
	if len(c.seqs) > 0 {
		r.NewestCheckpoint = c.seqs[len(c.seqs)-1]
	}
	return c
}

func signatureProblem(cp Checkpoint, trusted []ed25519.PublicKey, prefix string) (Problem, bool) {
	err := cp.Verify(trusted)
	switch {
	case err == nil:
		return Problem{}, true
	case errors.Is(err, ErrUnknownKey):
		return Problem{Kind: ProblemUnknownKey, Seq: cp.Seq,
			Message: fmt.Sprintf("%scheckpoint at seq %d is signed by key %s, which is not a trusted audit public key", prefix, cp.Seq, cp.KeyID)}, false
	default:
		return Problem{Kind: ProblemBadSignature, Seq: cp.Seq,
			Message: fmt.Sprintf("%scheckpoint at seq %d has a bad signature: it was not signed by the audit key %s", prefix, cp.Seq, cp.KeyID)}, false
	}
}

// Row checks the next row. Feed every row, in seq order, even after the
// chain broke: the checkpoints and the log's end are still compared.
func (c *Check) Row(r Row) {
	if c.chainOK {
		if err := c.chain.Check(r); err != nil {
			c.chainOK = false
			var be *BrokenError
			if !errors.As(err, &be) {
				be = &BrokenError{Seq: r.Seq, Reason: err.Error()}
			}
			c.report.broken = be
			c.report.Problems = append(c.report.Problems, Problem{Kind: ProblemBrokenRow, Seq: be.Seq, Message: be.Error()})
		}
	}
	c.report.LastSeq = max(c.report.LastSeq, r.Seq)
	if c.key != nil {
		if p, ok := EntryMACProblem(c.macer, c.key, r); !ok {
			if c.forged++; c.forged <= maxForgedNamed {
				c.report.Problems = append(c.report.Problems, p)
			}
		}
	}
	want, ok := c.want[r.Seq]
	if !ok {
		return
	}
	if string(want) == string(r.Hash) {
		if c.firstWrong == 0 {
			c.lastGood = r.Seq
		}
		return
	}
	if c.firstWrong != 0 {
		c.wrongAfter++
		return
	}
	c.firstWrong = r.Seq
	msg := fmt.Sprintf("checkpoint at seq %d was signed over a different hash", r.Seq)
	if c.chainOK {
		msg = "chain hashes valid but " + msg
	}
	msg += fmt.Sprintf(": a row in seq %d..%d was changed", c.lastGood+1, r.Seq)
	if c.chainOK {
		msg += " and every hash after it recomputed"
	}
	c.report.Problems = append(c.report.Problems, Problem{Kind: ProblemRechained, Seq: r.Seq, Message: msg})
}

// Finish returns the report once every row was fed.
func (c *Check) Finish() *Report {
	r := &c.report
	r.Entries = c.chain.Checked
	if c.wrongAfter > 0 {
		for i := range r.Problems {
			if r.Problems[i].Kind == ProblemRechained {
				r.Problems[i].Message += fmt.Sprintf(" (%d later checkpoint(s) disagree too)", c.wrongAfter)
			}
		}
	}
	if c.forged > maxForgedNamed {
		r.Problems = append(r.Problems, Problem{Kind: ProblemForgedEntry,
			Message: fmt.Sprintf("%d more entries were not written by this gateway", c.forged-maxForgedNamed)})
	}
	if n := r.NewestCheckpoint; n > r.LastSeq {
		r.Problems = append(r.Problems, Problem{Kind: ProblemTruncated, Seq: n,
			Message: fmt.Sprintf("checkpoint at seq %d; the log ends at %d < %d", n, r.LastSeq, n)})
	}
	if r.Checkpoints == 0 && r.HeadSeq == 0 && r.LastSeq > 0 {
		r.Warnings = append(r.Warnings, "no signed checkpoints: the chain is checked, but deleting the newest rows or re-chaining would go unnoticed")
	} else if r.NewestCheckpoint > 0 && r.NewestCheckpoint < r.LastSeq {
		r.Warnings = append(r.Warnings, fmt.Sprintf("entries %d..%d are not covered by a checkpoint yet", r.NewestCheckpoint+1, r.LastSeq))
	}
	if r.Problems == nil {
		r.Problems = []Problem{}
	}
	if r.Warnings == nil {
		r.Warnings = []string{}
	}
	return r
}

// HeadState is what was found at the head file's path.
type HeadState int

const (
	HeadPresent HeadState = iota // holds at least one checkpoint line
	HeadMissing                  // no file
	HeadEmpty                    // a file without one parseable checkpoint
)

// FailClosed turns missing anchors into problems, for a log whose audit
// public key exists (so checkpoints are being made, and their absence is
// news, not a fresh install): a missing or empty head file, and a log of
// more than threshold entries with no checkpoint at all. Without it a
// superuser who deleted the head file and the checkpoint rows, then
// rewrote the log, would get "intact". threshold <= 0 skips the last rule.
func (r *Report) FailClosed(head HeadState, headName string, threshold int64) {
	switch head {
	case HeadMissing:
		r.Problems = append(r.Problems, Problem{Kind: ProblemNoHeadFile,
			Message: fmt.Sprintf("no head file at %s although the audit public key exists: it was deleted, or no checkpoint was ever signed (give --head if it lives elsewhere)", headName)})
	case HeadEmpty:
		r.Problems = append(r.Problems, Problem{Kind: ProblemEmptyHead,
			Message: fmt.Sprintf("head file %s holds no checkpoint although the audit public key exists: it was emptied or replaced", headName)})
	}
	if threshold > 0 && r.Checkpoints == 0 && r.HeadSeq == 0 && r.LastSeq > threshold {
		r.Problems = append(r.Problems, Problem{Kind: ProblemNoCheckpoints, Seq: r.LastSeq,
			Message: fmt.Sprintf("%d entries and no signed checkpoint, though one is due every %d entries: checkpoints were deleted or never made", r.LastSeq, threshold)})
	}
}
