package tokenizer

import (
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// normKind is one normalization step.
type normKind uint8

const (
	normNFC normKind = iota
	normNFD
	normNFKC
	normNFKD
	normPrepend       // put a before the text, unless the text is empty
	normReplace       // replace every a with b
	normStrip         // strip whitespace on the left and/or right
	normCollapseSpace // SentencePiece remove_extra_whitespaces: trim and squeeze ' '
)

type normStep struct {
	kind        normKind
	a, b        string
	left, right bool
}

// normalizer is a sequence of steps applied to each section of text between added
// tokens.
type normalizer struct {
	steps []normStep
}

func (n *normalizer) apply(s string) string {
	for i := range n.steps {
		st := &n.steps[i]
		switch st.kind {
		case normNFC:
			s = unicodeForm(norm.NFC, s)
		case normNFD:
			s = unicodeForm(norm.NFD, s)
		case normNFKC:
			s = unicodeForm(norm.NFKC, s)
		case normNFKD:
			s = unicodeForm(norm.NFKD, s)
		case normPrepend:
			if s != "" {
				s = st.a + s
			}
		case normReplace:
			if st.a != "" {
				s = strings.ReplaceAll(s, st.a, st.b)
			}
		case normStrip:
			if st.left {
				s = strings.TrimLeftFunc(s, unicode.IsSpace)
			}
			if st.right {
				s = strings.TrimRightFunc(s, unicode.IsSpace)
			}
		case normCollapseSpace:
			s = collapseSpaces(s)
		}
	}
	return s
}

// unicodeForm applies a Unicode normalization form, skipping the work for text that
// is already in it (all ASCII text is).
func unicodeForm(f norm.Form, s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii || f.IsNormalString(s) {
		return s
	}
	return f.String(s)
}

// collapseSpaces removes leading and trailing spaces and squeezes runs of spaces to
// one, as SentencePiece's remove_extra_whitespaces does (only U+0020 counts).
func collapseSpaces(s string) string {
	s = strings.Trim(s, " ")
	if !strings.Contains(s, "  ") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	prevSpace := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == ' ' {
			if prevSpace {
				continue
			}
			prevSpace = true
		} else {
			prevSpace = false
		}
		b.WriteByte(c)
	}
	return b.String()
}
