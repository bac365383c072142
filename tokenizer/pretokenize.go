package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizers cut a section of text into pieces that BPE merges separately.
// The Hugging Face files give them as regular expressions with a lookahead, which Go's
// regexp lacks, so each one is a hand-written scanner. Classes are those of the Rust
// library's regex engine (Oniguruma): \p{L} letters, \p{N} numbers, \s the Unicode
// White_Space property (which unicode.IsSpace implements).

// splitKind names a scanner.
type splitKind uint8

const (
	// splitGPT2 is the GPT-2 pattern of the ByteLevel pre-tokenizer:
	//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
	splitGPT2 splitKind = iota
	// splitLlama3 is the Llama 3 pattern:
	//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	splitLlama3
	// splitQwen2 is the Qwen2 pattern, Llama 3's with single digits (\p{N} for \p{N}{1,3}).
	splitQwen2
	// splitMetaspace cuts before every ▁ (Metaspace with split true).
	splitMetaspace
	// splitMergedPrev cuts after every occurrence of the literal (a Split with a
	// String pattern and behavior MergedWithPrevious: the delimiter ends its piece).
	splitMergedPrev
	// splitIsolated makes every occurrence of the literal a piece of its own (a Split
	// with a String pattern and behavior Isolated).
	splitIsolated
)

// The patterns as tokenizer.json files spell them.
const (
	patternGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// Metaspace prepend schemes.
const (
	prependAlways uint8 = iota
	prependFirst
	prependNever
)

// preTokenizer is the pre-tokenization of a tokenizer: an optional transformation of
// each section (ByteLevel's add_prefix_space, Metaspace's replacement) and a chain of
// scanners, each cutting the pieces of the one before.
type preTokenizer struct {
	prefixSpace bool // ByteLevel add_prefix_space: a space in front unless there is one
	meta        bool // Metaspace: spaces become metaRepl, which is put in front per metaPrepend
	metaRepl    string
	metaPrepend uint8
	splits      []splitKind
	literal     string // the String pattern of splitMergedPrev and splitIsolated
}

// transform applies the section-level part of pre-tokenization. first tells whether
// the section starts the text (for Metaspace's prepend_scheme "first").
func (p *preTokenizer) transform(s string, first bool) string {
	if p.prefixSpace && !strings.HasPrefix(s, " ") {
		s = " " + s
	}
	if p.meta {
		s = strings.ReplaceAll(s, " ", p.metaRepl)
		if (p.metaPrepend == prependAlways || p.metaPrepend == prependFirst && first) && !strings.HasPrefix(s, p.metaRepl) {
			s = p.metaRepl + s
		}
	}
	return s
}

// nextPiece returns the end of the piece of s that starts at i (i < len(s)); lit is
// the literal of the String-pattern splits.
func nextPiece(k splitKind, s string, i int, lit string) int {
	switch k {
	case splitGPT2:
		return nextGPT2(s, i)
	case splitLlama3:
		return nextLlama3(s, i, 3)
	case splitQwen2:
		return nextLlama3(s, i, 1)
	case splitMergedPrev:
		if k := strings.Index(s[i:], lit); k >= 0 {
			return i + k + len(lit)
		}
		return len(s)
	case splitIsolated:
		if strings.HasPrefix(s[i:], lit) {
			return i + len(lit)
		}
		if k := strings.Index(s[i:], lit); k >= 0 {
			return i + k
		}
		return len(s)
	default:
		return nextMetaspace(s, i)
	}
}

// Character classes of the scanners.
const (
	clsOther uint8 = iota
	clsLetter
	clsNumber
	clsSpace
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for c := range t {
		switch r := rune(c); {
		case unicode.IsLetter(r):
			t[c] = clsLetter
		case unicode.IsNumber(r):
			t[c] = clsNumber
		case unicode.IsSpace(r):
			t[c] = clsSpace
		}
	}
	return t
}()

func classOf(r rune) uint8 {
	if r < utf8.RuneSelf {
		return asciiClass[r]
	}
	switch {
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsSpace(r):
		return clsSpace
	}
	return clsOther
}

// decodeAt decodes the rune at s[i]; invalid UTF-8 is one byte of class other.
func decodeAt(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// scanClass returns the end of the run of class cls that starts at j.
func scanClass(s string, j int, cls uint8) int {
	for j < len(s) {
		if c := s[j]; c < utf8.RuneSelf {
			if asciiClass[c] != cls {
				return j
			}
			j++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[j:])
		if classOf(r) != cls {
			return j
		}
		j += w
	}
	return j
}

// scanSpaces handles \s+(?!\S)|\s+ at i: a run of whitespace that is followed by a
// non-space gives up its last character (which then leads the next piece), unless
// the run is a single character.
func scanSpaces(s string, i int) int {
	j, last := i, i
	for j < len(s) {
		r, w := decodeAt(s, j)
		if classOf(r) != clsSpace {
			break
		}
		last = j
		j += w
	}
	if j == len(s) || last == i {
		return j
	}
	return last
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// contraction returns the length of the contraction suffix ('s 't 're 've 'm 'll 'd
// without the apostrophe) at the start of rest, or 0. With fold, letters match in
// either case, and s also matches ſ (U+017F), whose case folding is s, as the
// (?i:...) group of the Rust library's regex engines has it.
func contraction(rest string, fold bool) int {
	if rest == "" {
		return 0
	}
	at := func(k int) byte {
		if k >= len(rest) {
			return 0
		}
		if fold {
			return lowerASCII(rest[k])
		}
		return rest[k]
	}
	switch at(0) {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if at(1) == 'e' {
			return 2
		}
	case 'l':
		if at(1) == 'l' {
			return 2
		}
	}
	if fold && strings.HasPrefix(rest, "ſ") {
		return len("ſ")
	}
	return 0
}

func nextGPT2(s string, i int) int {
	c := s[i]
	if c == '\'' {
		if n := contraction(s[i+1:], false); n > 0 {
			return i + 1 + n
		}
	}
	if c == ' ' && i+1 < len(s) {
		r2, w2 := decodeAt(s, i+1)
		if cls := classOf(r2); cls != clsSpace {
			return scanClass(s, i+1+w2, cls)
		}
		return scanSpaces(s, i)
	}
	r, w := decodeAt(s, i)
	if cls := classOf(r); cls != clsSpace {
		return scanClass(s, i+w, cls)
	}
	return scanSpaces(s, i)
}

func nextLlama3(s string, i int, maxDigits int) int {
	c := s[i]
	if c == '\'' {
		if n := contraction(s[i+1:], true); n > 0 {
			return i + 1 + n
		}
	}
	r, w := decodeAt(s, i)
	cls := classOf(r)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if cls == clsLetter {
		return scanClass(s, i+w, clsLetter)
	}
	if cls != clsNumber && r != '\r' && r != '\n' && i+w < len(s) {
		if r2, w2 := decodeAt(s, i+w); classOf(r2) == clsLetter {
			return scanClass(s, i+w+w2, clsLetter)
		}
	}
	// \p{N}{1,maxDigits}
	if cls == clsNumber {
		j := i + w
		for n := 1; j < len(s) && n < maxDigits; n++ {
			r, w := decodeAt(s, j)
			if classOf(r) != clsNumber {
				break
			}
			j += w
		}
		return j
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	j := i
	if c == ' ' {
		j++
	}
	if j < len(s) {
		if r2, w2 := decodeAt(s, j); classOf(r2) == clsOther {
			j = scanClass(s, j+w2, clsOther)
			for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
				j++
			}
			return j
		}
	}
	// Only whitespace is left. \s*[\r\n]+ takes the run up to its last CR or LF.
	j, last, nlEnd := i, i, -1
	for j < len(s) {
		r, w := decodeAt(s, j)
		if classOf(r) != clsSpace {
			break
		}
		if r == '\r' || r == '\n' {
			nlEnd = j + w
		}
		last = j
		j += w
	}
	if nlEnd > 0 {
		return nlEnd
	}
	// \s+(?!\S)|\s+
	if j == len(s) || last == i {
		return j
	}
	return last
}

// nextMetaspace cuts before every ▁: the piece at i runs to the next ▁ after i.
func nextMetaspace(s string, i int) int {
	const meta = "▁"
	j := i
	if strings.HasPrefix(s[i:], meta) {
		j += len(meta)
	}
	if k := strings.Index(s[j:], meta); k >= 0 {
		return j + k
	}
	return len(s)
}
