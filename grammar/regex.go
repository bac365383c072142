package grammar

import (
	"fmt"
	"regexp/syntax"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ParseRegex compiles a regular expression (Go's RE2 syntax, which covers the
// common Perl forms) that the whole output must match: anchors are implied, and a ^
// at the start or a $ at the end is accepted; anchors elsewhere and word boundaries
// are refused.
func ParseRegex(pattern string) (*Grammar, error) {
	body, err := regexGBNF(pattern, false)
	if err != nil {
		return nil, err
	}
	return ParseGBNF("root ::= " + body + "\n")
}

// regexGBNF writes a regular expression as a GBNF expression. Inside a JSON string
// (jsonString) every character is written as JSON encodes it, and the classes leave
// out the characters JSON must escape.
func regexGBNF(pattern string, jsonString bool) (string, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return "", fmt.Errorf("%w: regular expression %q: %v", ErrSyntax, pattern, err)
	}
	var b strings.Builder
	w := regexWriter{b: &b, json: jsonString}
	if err := w.write(trimAnchors(re.Simplify())); err != nil {
		return "", fmt.Errorf("%w: regular expression %q: %v", ErrSyntax, pattern, err)
	}
	return b.String(), nil
}

// trimAnchors drops the anchors at the ends of re, which a whole-text match implies.
func trimAnchors(re *syntax.Regexp) *syntax.Regexp {
	isStart := func(r *syntax.Regexp) bool { return r.Op == syntax.OpBeginText || r.Op == syntax.OpBeginLine }
	isEnd := func(r *syntax.Regexp) bool { return r.Op == syntax.OpEndText || r.Op == syntax.OpEndLine }
	switch {
	case isStart(re) || isEnd(re):
		return &syntax.Regexp{Op: syntax.OpEmptyMatch}
	case re.Op == syntax.OpConcat:
		sub := re.Sub
		for len(sub) > 0 && isStart(sub[0]) {
			sub = sub[1:]
		}
		for len(sub) > 0 && isEnd(sub[len(sub)-1]) {
			sub = sub[:len(sub)-1]
		}
		c := *re
		c.Sub = sub
		if len(sub) == 0 {
			return &syntax.Regexp{Op: syntax.OpEmptyMatch}
		}
		return &c
	}
	return re
}

type regexWriter struct {
	b    *strings.Builder
	json bool
}

func (w regexWriter) write(re *syntax.Regexp) error {
	switch re.Op {
	case syntax.OpNoMatch:
		return fmt.Errorf("it matches nothing")
	case syntax.OpEmptyMatch:
		w.b.WriteString(`""`)
	case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText:
		return fmt.Errorf("^ and $ are supported at the ends of the pattern only")
	case syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return fmt.Errorf("word boundaries (\\b, \\B) are not supported")
	case syntax.OpLiteral:
		w.b.WriteString("(")
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 {
				w.class([]rune{r, r}, true)
			} else {
				w.literal(r)
			}
		}
		w.b.WriteString(")")
	case syntax.OpCharClass:
		w.class(re.Rune, false)
	case syntax.OpAnyCharNotNL:
		w.class([]rune{0, '\n' - 1, '\n' + 1, utf8.MaxRune}, false)
	case syntax.OpAnyChar:
		w.class([]rune{0, utf8.MaxRune}, false)
	case syntax.OpCapture:
		return w.write(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		w.b.WriteString("(")
		if err := w.write(re.Sub[0]); err != nil {
			return err
		}
		w.b.WriteString(")")
		w.b.WriteString(map[syntax.Op]string{syntax.OpStar: "*", syntax.OpPlus: "+", syntax.OpQuest: "?"}[re.Op])
	case syntax.OpRepeat:
		w.b.WriteString("(")
		if err := w.write(re.Sub[0]); err != nil {
			return err
		}
		if re.Max < 0 {
			fmt.Fprintf(w.b, "){%d,}", re.Min)
		} else {
			fmt.Fprintf(w.b, "){%d,%d}", re.Min, re.Max)
		}
	case syntax.OpConcat, syntax.OpAlternate:
		sep := " "
		if re.Op == syntax.OpAlternate {
			sep = " | "
		}
		w.b.WriteString("(")
		for i, s := range re.Sub {
			if i > 0 {
				w.b.WriteString(sep)
			}
			if err := w.write(s); err != nil {
				return err
			}
		}
		w.b.WriteString(")")
	default:
		return fmt.Errorf("%v is not supported", re.Op)
	}
	return nil
}

// literal writes one character as a GBNF literal.
func (w regexWriter) literal(r rune) {
	if w.json {
		enc := jsonEscape(string(r))
		w.b.WriteString(Quote(enc))
		return
	}
	w.b.WriteString(Quote(string(r)))
}

// class writes a character class of rune pairs (lo, hi, lo, hi, …); fold adds the
// other cases.
func (w regexWriter) class(pairs []rune, fold bool) {
	var rs []runeRange
	for i := 0; i+1 < len(pairs); i += 2 {
		rs = append(rs, runeRange{pairs[i], pairs[i+1]})
		if fold {
			for r := pairs[i]; r <= pairs[i+1] && r-pairs[i] < 256; r++ {
				for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
					rs = append(rs, runeRange{f, f})
				}
			}
		}
	}
	if w.json {
		// Inside a JSON string the text is encoded: only the characters that need no
		// escape are written as they are.
		rs = intersect(rs, jsonPlainChars)
	}
	w.b.WriteString(gbnfClass(normalize(rs)))
}

// jsonPlainChars are the characters a JSON string holds without an escape.
var jsonPlainChars = []runeRange{{0x20, 0x21}, {0x23, 0x5B}, {0x5D, utf8.MaxRune}}

// intersect is the code points in both a and b.
func intersect(a, b []runeRange) []runeRange {
	return complement(append(complement(a), complement(b)...))
}

// Quote writes s as a GBNF literal that matches exactly s: quote and backslash
// escaped, control characters as \xXX (what a grammar built around text a caller
// gives — a list of choices, say — needs).
func Quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7F:
			fmt.Fprintf(&b, `\x%02X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// gbnfClass writes code point ranges as a GBNF class.
func gbnfClass(rs []runeRange) string {
	if len(rs) == 0 {
		return `[^\x00-\U0010FFFF]` // nothing: refused by the parser with a clear error
	}
	var b strings.Builder
	b.WriteByte('[')
	for _, r := range rs {
		b.WriteString(classChar(r.lo))
		if r.hi > r.lo {
			b.WriteByte('-')
			b.WriteString(classChar(r.hi))
		}
	}
	b.WriteByte(']')
	return b.String()
}

func classChar(r rune) string {
	switch {
	case r == '\\' || r == ']' || r == '[' || r == '-' || r == '^' || r == '"':
		return `\` + string(r)
	case r < 0x20 || r == 0x7F:
		return fmt.Sprintf(`\x%02X`, r)
	case r > 0xFFFF:
		return fmt.Sprintf(`\U%08X`, r)
	}
	return string(r)
}

// jsonEscape is s as the inside of a JSON string.
func jsonEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	return b.String()
}
