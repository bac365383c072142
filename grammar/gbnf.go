package grammar

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ParseGBNF compiles a grammar in llama.cpp's GBNF: rules "name ::= alternatives",
// alternatives separated by "|", sequences of "literals", [character classes] (with
// ranges, ^ negation and the escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH),
// rule names, (groups), "." for any character, and the repetitions *, +, ?, {m},
// {m,} and {m,n}; # starts a comment. As in llama.cpp a rule ends at the end of its
// line unless a group or an "|" is open, and the start rule is "root". Errors wrap
// ErrSyntax and give the line and column.
func ParseGBNF(src string) (*Grammar, error) {
	p := &gbnfParser{src: src, b: newBuilder()}
	if err := p.parse(); err != nil {
		return nil, err
	}
	if _, ok := p.b.byName["root"]; !ok {
		return nil, fmt.Errorf("%w: the grammar has no rule \"root\"", ErrSyntax)
	}
	return p.b.compile("root")
}

type gbnfParser struct {
	src string
	pos int
	b   *builder
}

// errorf is a syntax error at the current position.
func (p *gbnfParser) errorf(format string, args ...any) error {
	return p.errorAt(p.pos, format, args...)
}

func (p *gbnfParser) errorAt(pos int, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrSyntax, p.where(pos), fmt.Sprintf(format, args...))
}

// where is "line L, column C" of a byte offset (columns count characters).
func (p *gbnfParser) where(pos int) string {
	before := p.src[:min(pos, len(p.src))]
	line := strings.Count(before, "\n") + 1
	col := utf8.RuneCountInString(before[strings.LastIndexByte(before, '\n')+1:]) + 1
	return fmt.Sprintf("line %d, column %d", line, col)
}

func (p *gbnfParser) peek() byte {
	if p.pos < len(p.src) {
		return p.src[p.pos]
	}
	return 0
}

// space skips blanks and comments, and newlines when newlineOK.
func (p *gbnfParser) space(newlineOK bool) {
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; {
		case c == ' ' || c == '\t':
			p.pos++
		case c == '#':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' && p.src[p.pos] != '\r' {
				p.pos++
			}
		case (c == '\n' || c == '\r') && newlineOK:
			p.pos++
		default:
			return
		}
	}
}

func isWordChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

func (p *gbnfParser) name() string {
	start := p.pos
	for p.pos < len(p.src) && isWordChar(p.src[p.pos]) {
		p.pos++
	}
	return p.src[start:p.pos]
}

// parse reads every rule.
func (p *gbnfParser) parse() error {
	p.space(true)
	for p.pos < len(p.src) {
		if err := p.rule(); err != nil {
			return err
		}
		p.space(true)
	}
	return nil
}

func (p *gbnfParser) rule() error {
	at := p.pos
	name := p.name()
	if name == "" {
		return p.errorf("expected a rule name, found %q", p.peek())
	}
	p.space(false)
	if !strings.HasPrefix(p.src[p.pos:], "::=") {
		return p.errorf(`expected "::=" after the rule name %q`, name)
	}
	p.pos += 3
	p.space(true)
	i := p.b.rule(name, p.where(at))
	if p.b.rules[i].defined {
		return p.errorAt(at, "rule %q is defined twice", name)
	}
	alts, err := p.alternates(name, false)
	if err != nil {
		return err
	}
	p.b.rules[i].alts, p.b.rules[i].defined = alts, true
	if c := p.peek(); c != 0 && c != '\n' && c != '\r' {
		return p.errorf("expected the end of the rule, found %q", c)
	}
	return nil
}

func (p *gbnfParser) alternates(rule string, nested bool) ([][]elem, error) {
	var alts [][]elem
	for {
		seq, err := p.sequence(rule, nested)
		if err != nil {
			return nil, err
		}
		alts = append(alts, seq)
		if p.peek() != '|' {
			return alts, nil
		}
		p.pos++
		p.space(true)
	}
}

// sequence reads terms with their repetitions until "|", ")", the end of the line (at
// the top of a rule) or of the text.
func (p *gbnfParser) sequence(rule string, nested bool) ([]elem, error) {
	var seq []elem
	for {
		start := p.pos
		term, ok, err := p.term(rule)
		if err != nil {
			return nil, err
		}
		if !ok {
			return seq, nil
		}
		p.space(nested)
		term, err = p.repetition(rule, term, start)
		if err != nil {
			return nil, err
		}
		seq = append(seq, term...)
		p.space(nested)
	}
}

// term reads one literal, class, rule reference, group or ".", reporting false at
// the end of a sequence.
func (p *gbnfParser) term(rule string) ([]elem, bool, error) {
	switch c := p.peek(); {
	case c == '"':
		s, err := p.quoted()
		return p.b.literal(s), true, err
	case c == '[':
		e, err := p.charClass(rule)
		return []elem{e}, true, err
	case c == '(':
		p.pos++
		p.space(true)
		alts, err := p.alternates(rule, true)
		if err != nil {
			return nil, false, err
		}
		if p.peek() != ')' {
			return nil, false, p.errorf(`expected ")" to close the group`)
		}
		p.pos++
		return []elem{ref(p.b.anon(rule, alts...))}, true, nil
	case c == '.':
		p.pos++
		return []elem{p.b.class(rule, []runeRange{{0, utf8.MaxRune}})}, true, nil
	case c == '<':
		return nil, false, p.errorf("tokens (<...>) in grammars are not supported: write their text as a literal")
	case isWordChar(c):
		at := p.pos
		name := p.name()
		return []elem{ref(p.b.rule(name, p.where(at)))}, true, nil
	}
	return nil, false, nil
}

// repetition applies a following *, +, ?, {m}, {m,} or {m,n} to term.
func (p *gbnfParser) repetition(rule string, term []elem, start int) ([]elem, error) {
	switch p.peek() {
	case '*':
		p.pos++
		return p.b.repeat(rule, term, 0, -1), nil
	case '+':
		p.pos++
		return p.b.repeat(rule, term, 1, -1), nil
	case '?':
		p.pos++
		return p.b.repeat(rule, term, 0, 1), nil
	case '{':
		at := p.pos
		p.pos++
		p.space(false)
		lo, ok := p.number()
		if !ok {
			return nil, p.errorf("expected a number after {")
		}
		hi := lo
		p.space(false)
		if p.peek() == ',' {
			p.pos++
			p.space(false)
			if n, ok := p.number(); ok {
				hi = n
			} else {
				hi = -1
			}
			p.space(false)
		}
		if p.peek() != '}' {
			return nil, p.errorf("expected } to close the repetition")
		}
		p.pos++
		if hi >= 0 && hi < lo || lo > 10000 || hi > 10000 {
			return nil, p.errorAt(at, "repetition {%d,%d} is impossible or too large", lo, hi)
		}
		return p.b.repeat(rule, term, lo, hi), nil
	}
	return term, nil
}

func (p *gbnfParser) number() (int, bool) {
	start := p.pos
	for p.pos < len(p.src) && p.src[p.pos] >= '0' && p.src[p.pos] <= '9' {
		p.pos++
	}
	n, err := strconv.Atoi(p.src[start:p.pos])
	return n, err == nil
}

// quoted reads a "literal", escapes decoded.
func (p *gbnfParser) quoted() (string, error) {
	at := p.pos
	p.pos++ // "
	var b strings.Builder
	for {
		if p.pos >= len(p.src) || p.src[p.pos] == '\n' {
			return "", p.errorAt(at, "unterminated literal")
		}
		if p.src[p.pos] == '"' {
			p.pos++
			return b.String(), nil
		}
		r, err := p.char()
		if err != nil {
			return "", err
		}
		b.WriteRune(r)
	}
}

// char reads one character of a literal or class, decoding an escape.
func (p *gbnfParser) char() (rune, error) {
	if p.src[p.pos] != '\\' {
		r, n := utf8.DecodeRuneInString(p.src[p.pos:])
		if r == utf8.RuneError && n == 1 {
			return 0, p.errorf("invalid UTF-8")
		}
		p.pos += n
		return r, nil
	}
	at := p.pos
	p.pos++
	if p.pos >= len(p.src) {
		return 0, p.errorAt(at, "unterminated escape")
	}
	c := p.src[p.pos]
	p.pos++
	switch c {
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case '\\', '"', '[', ']', '-', '^':
		return rune(c), nil
	case 'x', 'u', 'U':
		n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
		if p.pos+n > len(p.src) {
			return 0, p.errorAt(at, "\\%c needs %d hexadecimal digits", c, n)
		}
		v, err := strconv.ParseUint(p.src[p.pos:p.pos+n], 16, 32)
		if err != nil || v > utf8.MaxRune {
			return 0, p.errorAt(at, "\\%c%s is not a character", c, p.src[p.pos:p.pos+n])
		}
		p.pos += n
		return rune(v), nil
	}
	return 0, p.errorAt(at, "unknown escape \\%c", c)
}

// charClass reads [...] or [^...].
func (p *gbnfParser) charClass(rule string) (elem, error) {
	at := p.pos
	p.pos++
	negate := p.peek() == '^'
	if negate {
		p.pos++
	}
	var ranges []runeRange
	for {
		if p.pos >= len(p.src) || p.src[p.pos] == '\n' {
			return elem{}, p.errorAt(at, "unterminated character class")
		}
		if p.src[p.pos] == ']' {
			p.pos++
			break
		}
		from := p.pos
		lo, err := p.char()
		if err != nil {
			return elem{}, err
		}
		hi := lo
		if p.peek() == '-' && p.pos+1 < len(p.src) && p.src[p.pos+1] != ']' {
			p.pos++
			if hi, err = p.char(); err != nil {
				return elem{}, err
			}
			if hi < lo {
				return elem{}, p.errorAt(from, "range %q-%q is reversed", lo, hi)
			}
		}
		ranges = append(ranges, runeRange{lo, hi})
	}
	if negate {
		ranges = complement(ranges)
	}
	if len(normalize(ranges)) == 0 {
		return elem{}, p.errorAt(at, "the character class matches nothing")
	}
	return p.b.class(rule, ranges), nil
}
