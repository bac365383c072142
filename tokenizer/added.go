package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// addedToken is a token matched in the text before normalization and BPE: a special
// token (chat markers, BOS/EOS written out) or a user-defined symbol.
type addedToken struct {
	id         int32
	content    string
	special    bool // skipped unless ParseSpecial
	singleWord bool // only matches between non-word characters
	lstrip     bool // swallows the whitespace before it
	rstrip     bool // swallows the whitespace after it
	normalized bool // matched in the normalized text rather than the raw text
}

// addedVocab finds added tokens in text: raw holds the tokens matched in the text as
// given, norm those matched after normalization.
type addedVocab struct {
	tokens []addedToken
	raw    matcher
	norm   matcher
}

// matcher finds the leftmost-longest occurrence of a set of strings with a byte trie.
type matcher struct {
	first [256]bool
	nodes []trieNode
}

type trieNode struct {
	next  map[byte]int32
	token int32 // index into addedVocab.tokens, -1 if no token ends here
}

func (m *matcher) empty() bool { return len(m.nodes) == 0 }

func (m *matcher) add(s string, token int32) {
	if s == "" {
		return
	}
	if len(m.nodes) == 0 {
		m.nodes = append(m.nodes, trieNode{token: -1})
	}
	m.first[s[0]] = true
	n := int32(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		next, ok := m.nodes[n].next[c]
		if !ok {
			if m.nodes[n].next == nil {
				m.nodes[n].next = make(map[byte]int32)
			}
			next = int32(len(m.nodes))
			m.nodes[n].next[c] = next
			m.nodes = append(m.nodes, trieNode{token: -1})
		}
		n = next
	}
	if m.nodes[n].token < 0 {
		m.nodes[n].token = token
	}
}

// longest returns the token index and end of the longest allowed match starting at
// s[i], or -1.
func (m *matcher) longest(s string, i int, tokens []addedToken, parseSpecial bool) (int32, int) {
	best, end := int32(-1), 0
	n := int32(0)
	for j := i; j < len(s); j++ {
		next, ok := m.nodes[n].next[s[j]]
		if !ok {
			break
		}
		n = next
		if tk := m.nodes[n].token; tk >= 0 && (parseSpecial || !tokens[tk].special) {
			best, end = tk, j+1
		}
	}
	return best, end
}

// split calls section for each stretch of s that is not an added token (with its
// byte offset in s) and token for each added token, in order. Whitespace that an
// lstrip or rstrip token swallows is dropped. Empty sections are not reported.
func (v *addedVocab) split(m *matcher, s string, parseSpecial bool, section func(text string, off int), token func(id int32)) {
	if m.empty() {
		if s != "" {
			section(s, 0)
		}
		return
	}
	start := 0 // start of the pending section
	for i := 0; i < len(s); {
		if !m.first[s[i]] {
			i++
			continue
		}
		tk, end := m.longest(s, i, v.tokens, parseSpecial)
		if tk < 0 {
			i++
			continue
		}
		at := &v.tokens[tk]
		if at.singleWord && !(wordBoundaryBefore(s, i) && wordBoundaryAfter(s, end)) {
			// The Hugging Face matcher drops such a match and goes on after it.
			i = end
			continue
		}
		mStart, mEnd := i, end
		if at.lstrip {
			for mStart > start {
				r, w := utf8.DecodeLastRuneInString(s[start:mStart])
				if !unicode.IsSpace(r) {
					break
				}
				mStart -= w
			}
		}
		if at.rstrip {
			for mEnd < len(s) {
				r, w := utf8.DecodeRuneInString(s[mEnd:])
				if !unicode.IsSpace(r) {
					break
				}
				mEnd += w
			}
		}
		if mStart > start {
			section(s[start:mStart], start)
		}
		token(at.id)
		start, i = mEnd, mEnd
	}
	if start < len(s) {
		section(s[start:], start)
	}
}

func isWordRune(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
}

func wordBoundaryBefore(s string, i int) bool {
	if i == 0 {
		return true
	}
	r, _ := utf8.DecodeLastRuneInString(s[:i])
	return !isWordRune(r)
}

func wordBoundaryAfter(s string, i int) bool {
	if i >= len(s) {
		return true
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return !isWordRune(r)
}

// encodeText encodes text without BOS/EOS: added tokens first, then each section
// through normalizer, pre-tokenizer and model.
func (t *Tokenizer) encodeText(dst []int32, text string, parseSpecial bool, st *encState) []int32 {
	t.added.split(&t.added.raw, text, parseSpecial,
		func(sec string, off int) {
			norm := t.norm.apply(sec)
			if t.added.norm.empty() {
				dst = t.encodeSection(dst, norm, off == 0, st)
				return
			}
			t.added.split(&t.added.norm, norm, parseSpecial,
				func(sub string, subOff int) {
					dst = t.encodeSection(dst, sub, off == 0 && subOff == 0, st)
				},
				func(id int32) { dst = append(dst, id) })
		},
		func(id int32) { dst = append(dst, id) })
	return dst
}
