// Package redact finds credentials in text so they can be removed before
// the text is stored, shown to an agent, logged or audited. It is used at
// intake (a user pasting a bot token into chat) and on execution output
// (RedactValues with the values of the secrets the execution was given).
//
// Scan recognises credential formats with distinctive shapes — PEM private
// key blocks, Telegram bot tokens, Slack, GitHub, GitLab, npm, Hugging Face,
// Stripe, Google API and `sk-` API keys (OpenAI, Anthropic…), AWS access key
// ids, JWTs, passwords inside URLs and `password=`-style assignments — and
// long high-entropy strings.
//
// The high-entropy rule is where false positives live, so it is narrow on
// purpose. A maximal run of base64/base64url characters counts only when
// all of these hold:
//
//   - it is at least 32 characters long;
//   - it has both upper and lower case letters;
//   - read as words the way identifiers are (camelCase words, acronyms,
//     digit groups; '-', '_', '/' and '+' separate), its words are short:
//     a mean of at most 3.2 characters. Random base64 breaks into pieces of
//     about 1.9 characters (99.9% of 32-character random strings stay
//     under 3.2); identifiers, file paths and file names such as
//     "HTTP2ServerConnectionManager", "/home/Alice/Documents2/Reports" or
//     "x86_64-Linux-GNU-GCC12-Release" score 3.4 and more;
//   - its Shannon entropy is at least 4.0 bits per character (random
//     base64 of that length scores 4.2–5; hyphenated names such as
//     "k8s-prod-eu-west-1-Cluster-Node-Pool-2" score below 4).
//
// Measured on random base64 and alphanumeric tokens: about one 32-character
// token in a thousand fails one of these tests and is missed; from 40
// characters on, about one in five thousand.
//
// The trade-off: hexadecimal strings are never reported by the
// high-entropy rule. A git SHA, a sha256 checksum, a UUID or a container
// digest is indistinguishable from a hex-encoded secret by shape alone
// (hex has at most 4 bits per character and one letter case), and those
// identifiers are everywhere in operations chat. So a hex secret pasted
// bare (for example `openssl rand -hex 32`) is not caught by Scan; it is
// caught when it follows a key such as `api_key=`, and always by
// RedactValues once it is a stored secret. Base58/base64 identifiers that
// are not secrets (IPFS CIDs, some object ids) may be reported; redacting
// one costs a re-paste, missing a credential costs a rotation.
//
// Offsets are byte offsets into the string. The package never logs and
// keeps no state.
package redact

import (
	"math"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Finding is one detected credential: text[Start:End].
type Finding struct {
	Kind  string
	Start int
	End   int
}

// Kinds of finding.
const (
	KindPrivateKey       = "private_key"
	KindTelegramBotToken = "telegram_bot_token"
	KindSlackToken       = "slack_token"
	KindGitHubToken      = "github_token"
	KindGitLabToken      = "gitlab_token"
	KindNPMToken         = "npm_token"
	KindHuggingFaceToken = "huggingface_token"
	KindStripeKey        = "stripe_key"
	KindGoogleAPIKey     = "google_api_key"
	KindAWSAccessKeyID   = "aws_access_key_id"
	KindAPIKey           = "api_key"
	KindJWT              = "jwt"
	KindURLPassword      = "url_password"
	KindPassword         = "password"
	KindHighEntropy      = "high_entropy"
)

// Thresholds of the high-entropy rule (see the package doc).
const (
	MinEntropyLen  = 32
	MinEntropyBits = 4.0
	MaxMeanWordLen = 3.2
)

// A detector finds one kind by regexp; group selects the submatch that is
// the secret (0 = all of it); ok vets a match (boundaries, content).
type detector struct {
	kind string
	// hints: the regexp runs only if the text contains one of them.
	hints []string
	re    *regexp.Regexp
	group int
	ok    func(text string, start, end int) bool
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isTokenChar(c byte) bool { return isAlnum(c) || c == '_' || c == '-' }

// leftClear: the match does not continue a longer word on the left.
func leftClear(in func(byte) bool) func(string, int, int) bool {
	return func(text string, start, _ int) bool { return start == 0 || !in(text[start-1]) }
}

// bothClear: nor on the right.
func bothClear(in func(byte) bool) func(string, int, int) bool {
	return func(text string, start, end int) bool {
		return (start == 0 || !in(text[start-1])) && (end == len(text) || !in(text[end]))
	}
}

// classes counts which of lower case, upper case and digits s contains.
func classes(s string) int {
	var l, u, d int
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z':
			l = 1
		case c >= 'A' && c <= 'Z':
			u = 1
		case c >= '0' && c <= '9':
			d = 1
		}
	}
	return l + u + d
}

func hasDigit(s string) bool { return strings.ContainsAny(s, "0123456789") }

func longestAlnumRun(s string) int {
	best, cur := 0, 0
	for i := 0; i < len(s); i++ {
		if isAlnum(s[i]) {
			cur++
			best = max(best, cur)
		} else {
			cur = 0
		}
	}
	return best
}

// After a rejected match the search resumes at its end, never one byte
// later: every detector's left-boundary check rejects a match starting
// inside another token, so no match is lost that way, and Scan stays linear
// in the length of the text.
//
// The patterns are compiled on first use, not at package init: every
// process that links this package runs its init, the sandbox's init (the
// gateway re-executed for each run) too, and compiling them there cost
// ~6 ms of CPU per run (their counted repetitions expand to thousands of
// instructions).
var detectors = sync.OnceValue(func() []detector {
	return []detector{
		// Left of the digits anything but a digit ("…/bot123456789:AA…" is the
		// Bot API URL form); the secret part must mix character classes.
		{kind: KindTelegramBotToken, hints: []string{":"}, re: regexp.MustCompile(`[0-9]{8,10}:[A-Za-z0-9_-]{35}`),
			ok: func(text string, s, e int) bool {
				if s > 0 && isDigit(text[s-1]) || e < len(text) && isTokenChar(text[e]) {
					return false
				}
				return classes(text[e-35:e]) >= 2
			}},
		{kind: KindSlackToken, hints: []string{"xox", "xapp-"}, re: regexp.MustCompile(`(?:xox[abposr]|xoxe\.xox[bp]|xoxe|xapp)-[0-9A-Za-z-]{10,512}`),
			ok: func(text string, s, e int) bool { return leftClear(isTokenChar)(text, s, e) && hasDigit(text[s+5:e]) }},
		{kind: KindGitHubToken, hints: []string{"gh", "github_pat_"}, re: regexp.MustCompile(`(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})`),
			ok: leftClear(isTokenChar)},
		{kind: KindGitLabToken, hints: []string{"glpat-"}, re: regexp.MustCompile(`glpat-[0-9A-Za-z_-]{20,255}`), ok: leftClear(isTokenChar)},
		{kind: KindNPMToken, hints: []string{"npm_"}, re: regexp.MustCompile(`npm_[A-Za-z0-9]{36}`), ok: bothClear(isAlnum)},
		{kind: KindHuggingFaceToken, hints: []string{"hf_"}, re: regexp.MustCompile(`hf_[A-Za-z0-9]{34,255}`), ok: leftClear(isTokenChar)},
		{kind: KindStripeKey, hints: []string{"k_live_", "k_test_"}, re: regexp.MustCompile(`[rs]k_(?:live|test)_[0-9A-Za-z]{16,255}`), ok: leftClear(isTokenChar)},
		{kind: KindGoogleAPIKey, hints: []string{"AIza"}, re: regexp.MustCompile(`AIza[0-9A-Za-z_-]{35}`), ok: bothClear(isTokenChar)},
		{kind: KindAWSAccessKeyID, hints: []string{"AKIA", "ASIA"}, re: regexp.MustCompile(`(?:AKIA|ASIA)[A-Z0-9]{16}`), ok: bothClear(isAlnum)},
		{kind: KindAPIKey, hints: []string{"sk-"}, re: regexp.MustCompile(`sk-(?:proj-|ant-|svcacct-|admin-)?[A-Za-z0-9_-]{20,512}`),
			ok: func(text string, s, e int) bool {
				body := text[s+3 : e]
				return leftClear(isTokenChar)(text, s, e) && hasDigit(body) && strings.IndexFunc(body, isLetter) >= 0 && longestAlnumRun(body) >= 16
			}},
		{kind: KindJWT, hints: []string{"eyJ"}, re: regexp.MustCompile(`eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*`),
			ok: leftClear(func(c byte) bool { return isTokenChar(c) || c == '.' })},
		{kind: KindURLPassword, hints: []string{"://"}, re: regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s/?#@:]*:([^\s/?#@\[\]]+)@`), group: 1},
	}
})

// lazyRegexp compiles expr on first use (see detectors).
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// The password rule: a key that names a credential, ":" or "=", and a
// value (quoted, or up to the next space, quote, comma or semicolon). The
// key must not continue a word on the left ("DB_PASSWORD=" counts,
// "nopassword=" does not); placeholders ("$VAR", "<your key>", "{{ x }}",
// "********", "required") do not count.
var (
	// assignKey runs on asciiLower(text), which keeps every byte offset.
	assignKey = lazyRegexp("(?:password|passwd|passphrase|secret_key|client_secret|api_key|apikey|api-key|" +
		"access_token|auth_token|refresh_token|private_key|secret_access_key)[\"']?[ \t]*[:=][ \t]*")
	assignValue = lazyRegexp("^(?:\"([^\"\n]{6,200})\"|'([^'\n]{6,200})'|([^\\s\"'`,;]{6,1000}))")
)

// asciiLower lower-cases ASCII letters only, byte by byte, so offsets stay
// valid (also in invalid UTF-8).
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func scanAssignments(text string, fs []Finding, w *meter) []Finding {
	low := asciiLower(text)
	w.add(5 * len(text)) // lower-casing and the four Contains
	if !strings.Contains(low, "pass") && !strings.Contains(low, "secret") && !strings.Contains(low, "key") && !strings.Contains(low, "token") {
		return fs
	}
	skipTo := 0
	w.add(len(text)) // one pass finds every key
	for _, k := range assignKey().FindAllStringIndex(low, -1) {
		if k[0] < skipTo || k[0] > 0 && isAlnum(text[k[0]-1]) || k[1] == len(text) {
			continue
		}
		first := text[k[1]]
		if first == '"' || first == '\'' {
			if k[1]+1 < len(text) {
				first = text[k[1]+1]
			}
		}
		if strings.IndexByte("$<{[%*(", first) >= 0 {
			continue
		}
		// A value is at most 1,000 bytes (plus quotes): bound the input so
		// the match costs that, not the rest of the text.
		bounded := text[k[1]:min(len(text), k[1]+1002)]
		m := assignValue().FindStringSubmatchIndex(bounded)
		if m == nil {
			w.add(len(bounded))
			continue
		}
		w.add(m[1])
		g := 1
		for g < 3 && m[2*g] < 0 {
			g++
		}
		s, e := k[1]+m[2*g], k[1]+m[2*g+1]
		if placeholder[strings.ToLower(text[s:e])] {
			continue
		}
		fs = append(fs, Finding{Kind: KindPassword, Start: s, End: e})
		skipTo = k[1] + m[1]
	}
	return fs
}

// placeholder values that follow "password:" in docs and forms.
var placeholder = map[string]bool{"required": true, "optional": true, "string": true, "undefined": true, "redacted": true, "hidden": true, "notset": true}

func isLetter(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' }

var (
	pemBegin = lazyRegexp(`-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----`)
	pemEnd   = lazyRegexp(`-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----`)
)

// Scan returns the credentials found in text, sorted by position and
// non-overlapping (overlapping matches are merged, keeping the more specific
// kind). A credential found once is found wherever else its exact text
// occurs.
func Scan(text string) []Finding { return scan(text, nil) }

// meter counts Scan's work, for TestScanLinear: the bytes its searches
// and loops examine (a search is charged up to the end of its match, or to
// the end of what it was given when nothing matched: RE2 and strings.Index
// stop there) and the findings merge compares. A nil meter counts nothing.
type meter struct{ bytes int }

func (m *meter) add(n int) {
	if m != nil {
		m.bytes += n
	}
}

// search charges w for one search of rest that returned loc (nil: no match).
func (m *meter) search(rest string, loc []int) {
	if loc == nil {
		m.add(len(rest))
	} else {
		m.add(loc[1])
	}
}

func scan(text string, w *meter) []Finding {
	var fs []Finding
	fs = scanPEM(text, fs, w)
	for _, d := range detectors() {
		fs = scanDetector(text, d, fs, w)
	}
	fs = scanAssignments(text, fs, w)
	specific := len(fs)
	fs = scanEntropy(text, fs, w)
	return withRepeats(text, merge(fs, specific, w), w)
}

func scanPEM(text string, fs []Finding, w *meter) []Finding {
	pos := 0
	for pos < len(text) {
		b := pemBegin().FindStringIndex(text[pos:])
		w.search(text[pos:], b)
		if b == nil {
			break
		}
		start := pos + b[0]
		end := len(text) // an unterminated block is redacted to the end
		e := pemEnd().FindStringIndex(text[pos+b[1]:])
		w.search(text[pos+b[1]:], e)
		if e != nil {
			end = pos + b[1] + e[1]
		}
		fs = append(fs, Finding{Kind: KindPrivateKey, Start: start, End: end})
		pos = end
	}
	return fs
}

func scanDetector(text string, d detector, fs []Finding, w *meter) []Finding {
	w.add(len(d.hints) * len(text))
	if !slices.ContainsFunc(d.hints, func(h string) bool { return strings.Contains(text, h) }) {
		return fs
	}
	pos := 0
	for pos < len(text) {
		var m []int
		if d.group == 0 {
			m = d.re.FindStringIndex(text[pos:]) // the faster DFA path
		} else {
			m = d.re.FindStringSubmatchIndex(text[pos:])
		}
		w.search(text[pos:], m)
		if m == nil {
			break
		}
		s, e := pos+m[2*d.group], pos+m[2*d.group+1]
		if m[2*d.group] >= 0 && e > s && (d.ok == nil || d.ok(text, s, e)) {
			fs = append(fs, Finding{Kind: d.kind, Start: s, End: e})
		}
		pos += m[1]
	}
	return fs
}

func isEntropyChar(c byte) bool { return isAlnum(c) || c == '+' || c == '/' || c == '_' || c == '-' }

func scanEntropy(text string, fs []Finding, w *meter) []Finding {
	w.add(len(text)) // every byte once, to find the runs
	for i := 0; i < len(text); {
		if !isEntropyChar(text[i]) {
			i++
			continue
		}
		j := i
		for j < len(text) && isEntropyChar(text[j]) {
			j++
		}
		end := j
		for k := 0; k < 2 && end < len(text) && text[end] == '='; k++ { // base64 padding
			end++
		}
		w.add(4 * (j - i)) // HighEntropy: at most four passes over the run
		if HighEntropy(text[i:j]) {
			fs = append(fs, Finding{Kind: KindHighEntropy, Start: i, End: end})
		}
		i = end
	}
	return fs
}

// HighEntropy reports whether s (one run of base64/base64url characters,
// without padding) passes the high-entropy rule described in the package
// doc.
func HighEntropy(s string) bool {
	if len(s) < MinEntropyLen {
		return false
	}
	if strings.IndexFunc(s, isLower) < 0 || strings.IndexFunc(s, isUpper) < 0 {
		return false
	}
	if MeanWordLen(s) > MaxMeanWordLen {
		return false
	}
	return Entropy(s) >= MinEntropyBits
}

func isLower(r rune) bool { return r >= 'a' && r <= 'z' }
func isUpper(r rune) bool { return r >= 'A' && r <= 'Z' }
func isDigit(b byte) bool { return b >= '0' && b <= '9' }

// MeanWordLen splits s the way identifiers are read — capitalised or lower
// case words, upper case acronyms, digit groups; other characters separate
// — and returns the mean length of those words. Random strings break into
// pieces of about 1.9 characters; identifiers, paths and prose into words
// of 3.5 or more.
func MeanWordLen(s string) float64 {
	chars, words := 0, 0
	for i := 0; i < len(s); {
		c := s[i]
		j := i + 1
		switch {
		case isUpper(rune(c)):
			for j < len(s) && isUpper(rune(s[j])) {
				j++
			}
			if j < len(s) && isLower(rune(s[j])) {
				if j-i > 1 {
					j-- // "HTTPServer": the last capital starts the next word
				} else {
					for j < len(s) && isLower(rune(s[j])) {
						j++
					}
				}
			}
		case isLower(rune(c)):
			for j < len(s) && isLower(rune(s[j])) {
				j++
			}
		case isDigit(c):
			for j < len(s) && isDigit(s[j]) {
				j++
			}
		default:
			i++
			continue
		}
		chars += j - i
		words++
		i = j
	}
	if words == 0 {
		return 0
	}
	return float64(chars) / float64(words)
}

// Entropy is the Shannon entropy of s in bits per byte.
func Entropy(s string) float64 {
	if s == "" {
		return 0
	}
	var counts [256]int
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	n := float64(len(s))
	h := 0.0
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			h -= p * math.Log2(p)
		}
	}
	return h
}

// merge sorts findings and merges overlapping ones. Findings before index
// specific came from format detectors; a high-entropy run overlapping one of
// them is dropped (the format detector knows where the credential ends).
func merge(fs []Finding, specific int, w *meter) []Finding {
	if len(fs) == 0 {
		return nil
	}
	spec := fs[:specific]
	kept := fs[:specific:specific]
	for _, f := range fs[specific:] {
		w.add(len(spec)) // one comparison per format finding
		if !slices.ContainsFunc(spec, func(g Finding) bool { return f.Start < g.End && g.Start < f.End }) {
			kept = append(kept, f)
		}
	}
	return union(kept)
}

// union sorts findings and merges overlapping ones into one span (keeping
// the kind of the one that starts first, the longer one on a tie).
func union(fs []Finding) []Finding {
	slices.SortFunc(fs, func(a, b Finding) int {
		if a.Start != b.Start {
			return a.Start - b.Start
		}
		return b.End - a.End
	})
	out := fs[:1]
	for _, f := range fs[1:] {
		last := &out[len(out)-1]
		if f.Start < last.End {
			last.End = max(last.End, f.End)
			continue
		}
		out = append(out, f)
	}
	return out
}

// minRepeatLen: a finding at least this long is also redacted wherever
// else its exact text occurs in the same text (inside a longer string that
// did not qualify, for instance).
const minRepeatLen = 6

func withRepeats(text string, fs []Finding, w *meter) []Finding {
	var extra []Finding
	seen := map[string]bool{}
	for _, f := range fs {
		s := text[f.Start:f.End]
		if len(s) < minRepeatLen || seen[s] {
			continue
		}
		seen[s] = true
		for from := 0; from < len(text); {
			i := strings.Index(text[from:], s)
			if i < 0 {
				w.add(len(text) - from)
				break
			}
			w.add(i + len(s))
			i += from
			extra = append(extra, Finding{Kind: f.Kind, Start: i, End: i + len(s)})
			from = i + len(s)
		}
	}
	if len(extra) == 0 {
		return fs
	}
	return union(append(fs, extra...))
}

// Replacement is what a finding of kind becomes in Redact's output.
func Replacement(kind string) string { return "[redacted " + kind + "]" }

// Redact replaces every finding with "[redacted <kind>]" and returns the
// new text and the findings (offsets into the original text). The output
// scans clean: should a replacement ever join its neighbours into a new
// match, the text is scanned again (a few rounds at most; after that the
// whole text is withheld).
func Redact(text string) (string, []Finding) {
	fs := Scan(text)
	if len(fs) == 0 {
		return text, nil
	}
	out := apply(text, fs)
	for range 4 {
		again := Scan(out)
		if len(again) == 0 {
			return out, fs
		}
		out = apply(out, again)
	}
	if len(Scan(out)) == 0 {
		return out, fs
	}
	return Replacement("text"), fs
}

func apply(text string, fs []Finding) string {
	var b strings.Builder
	b.Grow(len(text))
	last := 0
	for _, f := range fs {
		b.WriteString(text[last:f.Start])
		b.WriteString(Replacement(f.Kind))
		last = f.End
	}
	b.WriteString(text[last:])
	return b.String()
}
