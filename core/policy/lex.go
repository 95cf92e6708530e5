package policy

import "strings"

// This file reads shell scripts (the argument of `sh -c`, `su -c`, `eval`,
// `env -S`…) just well enough for the blocklist to see the commands inside
// them. It is not a shell: it never expands anything and errs towards
// splitting too much, because a command found that would not really run can
// only cause a refusal, while a command missed could run unseen.
//
// What it understands: whitespace, 'single' and "double" quotes, backslash
// escapes and line continuations; the command separators ; & | && || |& and
// newlines; ( ) { } as separators wherever they appear (so `f(){ f|f& };f`
// and `{ rm -rf /; }` fall apart into their commands, and brace expansion
// `/{bin,usr}` is cut at the brace); $(…), `…` and $((…)), whose contents
// are read as scripts of their own, also inside double quotes; ${…} kept
// inside its word; # comments; redirection operators (> >> < <& >& &> <> >|,
// with a file descriptor number before them) kept as words of their own so
// that checks can see what is redirected where. Here-document bodies are
// read as commands (over-reading is the safe side).

// maxScriptDepth bounds nested command substitutions.
const maxScriptDepth = 8

// splitScript returns the simple commands of a shell script, each as its
// words. ok is false when substitutions nest deeper than maxScriptDepth: the
// caller cannot judge such a script and must refuse it.
func splitScript(s string) (cmds [][]string, ok bool) {
	l := &lexer{ok: true}
	l.run(s, 0, true)
	return l.cmds, l.ok
}

// splitWords splits a string into words the way `env -S` does: quotes and
// escapes, no operators. Substitutions are not expanded by env, so they stay
// literal.
func splitWords(s string) []string {
	l := &lexer{ok: true}
	l.run(s, 0, false)
	var words []string
	for _, c := range l.cmds {
		words = append(words, c...)
	}
	return words
}

type lexer struct {
	cmds   [][]string
	cur    []string
	word   strings.Builder
	inWord bool
	ok     bool
}

func (l *lexer) endWord() {
	if l.inWord {
		l.cur = append(l.cur, l.word.String())
		l.word.Reset()
		l.inWord = false
	}
}

func (l *lexer) endCmd() {
	l.endWord()
	if len(l.cur) > 0 {
		l.cmds = append(l.cmds, l.cur)
		l.cur = nil
	}
}

func (l *lexer) put(s string) {
	l.word.WriteString(s)
	l.inWord = true
}

// sub reads the inside of a command substitution as a script of its own.
func (l *lexer) sub(inner string, depth int) {
	if depth >= maxScriptDepth {
		l.ok = false
		return
	}
	in := &lexer{ok: true}
	in.run(inner, depth+1, true)
	l.cmds = append(l.cmds, in.cmds...)
	if !in.ok {
		l.ok = false
	}
}

// run lexes s. With shell false only words are split (env -S).
func (l *lexer) run(s string, depth int, shell bool) {
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			if i+1 < len(s) {
				if s[i+1] != '\n' {
					l.put(s[i+1 : i+2])
				}
				i += 2
			} else {
				l.put(`\`)
				i++
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				l.put(s[i+1:])
				i = len(s)
			} else {
				l.put(s[i+1 : i+1+j])
				i += j + 2
			}
		case c == '"':
			i = l.double(s, i+1, depth, shell)
		case shell && c == '$' && i+1 < len(s) && s[i+1] == '(':
			end := closeParen(s, i+2)
			l.put(s[i:min(end+1, len(s))])
			l.sub(s[i+2:end], depth)
			i = end + 1
		case shell && c == '$' && i+1 < len(s) && s[i+1] == '{':
			j := strings.IndexByte(s[i:], '}')
			if j < 0 {
				l.put(s[i:])
				i = len(s)
			} else {
				l.put(s[i : i+j+1])
				i += j + 1
			}
		case shell && c == '`':
			end := closeBacktick(s, i+1)
			l.put(s[i:min(end+1, len(s))])
			l.sub(s[i+1:end], depth)
			i = end + 1
		case shell && c == '#' && !l.inWord:
			j := strings.IndexByte(s[i:], '\n')
			if j < 0 {
				i = len(s)
			} else {
				i += j
			}
		case c == ' ' || c == '\t' || c == '\r' || (!shell && c == '\n'):
			l.endWord()
			i++
		case !shell:
			l.put(s[i : i+1])
			i++
		case c == '&' && i+1 < len(s) && s[i+1] == '>':
			l.endWord()
			i = l.redirect(s, i)
		case c == '\n' || c == ';' || c == '&' || c == '|' || c == '(' || c == ')' || c == '{' || c == '}':
			l.endCmd()
			i++
		case c == '<' || c == '>':
			l.endWord()
			i = l.redirect(s, i)
		default:
			l.put(s[i : i+1])
			i++
		}
	}
	l.endCmd()
}

// redirect reads a redirection operator starting at i and adds it as a word
// of its own; it returns the index after it.
func (l *lexer) redirect(s string, i int) int {
	j := i
	for j < len(s) && j-i < 3 && strings.IndexByte("<>&|", s[j]) >= 0 {
		j++
	}
	l.cur = append(l.cur, s[i:j])
	return j
}

// double reads a double-quoted string starting after its opening quote and
// returns the index after its closing quote.
func (l *lexer) double(s string, i, depth int, shell bool) int {
	l.inWord = true
	for i < len(s) {
		c := s[i]
		switch {
		case c == '"':
			return i + 1
		case c == '\\' && i+1 < len(s):
			n := s[i+1]
			switch n {
			case '"', '\\', '$', '`':
				l.word.WriteByte(n)
			case '\n':
			default:
				l.word.WriteByte('\\')
				l.word.WriteByte(n)
			}
			i += 2
		case shell && c == '$' && i+1 < len(s) && s[i+1] == '(':
			end := closeParen(s, i+2)
			l.word.WriteString(s[i:min(end+1, len(s))])
			l.sub(s[i+2:end], depth)
			i = end + 1
		case shell && c == '`':
			end := closeBacktick(s, i+1)
			l.word.WriteString(s[i:min(end+1, len(s))])
			l.sub(s[i+1:end], depth)
			i = end + 1
		default:
			l.word.WriteByte(c)
			i++
		}
	}
	return i
}

// closeParen returns the index of the parenthesis closing a substitution
// whose contents start at i, or len(s) when it is never closed. Quotes and
// escapes inside are skipped roughly; a mistake only changes which commands
// are read twice.
func closeParen(s string, i int) int {
	depth := 1
	for i < len(s) {
		switch s[i] {
		case '\\':
			i++
		case '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return len(s)
			}
			i += j + 1
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i
			}
		}
		i++
	}
	return len(s)
}

// closeBacktick returns the index of the unescaped backtick closing a
// substitution whose contents start at i, or len(s).
func closeBacktick(s string, i int) int {
	for i < len(s) {
		switch s[i] {
		case '\\':
			i++
		case '`':
			return i
		}
		i++
	}
	return len(s)
}

// shellKeywords are words that may start a command in a script without being
// the program that runs.
var shellKeywords = map[string]bool{
	"!": true, "if": true, "then": true, "else": true, "elif": true, "fi": true, "do": true, "done": true,
	"while": true, "until": true, "time": true, "esac": true, "in": true,
}

// commandWords strips the keywords and variable assignments that may precede
// the program in a simple command (`then X=1 rm -rf /` runs rm).
func commandWords(words []string) []string {
	for len(words) > 0 && (shellKeywords[words[0]] || isAssignment(words[0])) {
		words = words[1:]
	}
	return words
}

// isAssignment reports NAME=VALUE words.
func isAssignment(w string) bool {
	eq := strings.IndexByte(w, '=')
	if eq <= 0 {
		return false
	}
	for i := 0; i < eq; i++ {
		c := w[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
