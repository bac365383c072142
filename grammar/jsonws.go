package grammar

import (
	"fmt"
	"strings"
)

// Whitespace says which blanks the JSON and JSON Schema grammars allow between the
// tokens of a JSON text. Inside strings every character is the string's own, so
// this never touches them.
type Whitespace int

const (
	// WhitespaceIndent, the default, allows what encoding/json writes: Marshal's
	// compact output or MarshalIndent's. After "{" or "[" and after "," a newline
	// may start a line indented by up to 2 tabs or up to 8 spaces per nesting level
	// (tabs or spaces, not both, in one line; the levels need not agree), and
	// before "}" or "]" one indented by the level of the bracket; after ":" and ","
	// one space at most; before ":" and "," and after the root value, nothing.
	// The bound stops growing at the 9th level (16 tabs or 64 spaces before a
	// closing bracket, 18 or 72 before a member).
	WhitespaceIndent Whitespace = iota
	// WhitespaceCompact allows no whitespace at all: Marshal's output (vLLM's
	// disable_any_whitespace).
	WhitespaceCompact
	// WhitespaceFree allows, between any two tokens and after the root value, one
	// space or a newline and up to 20 blanks: this package's grammars before the
	// indent bound. A model under it may spend its token budget on blanks.
	WhitespaceFree
)

// String names the mode as its constant does.
func (w Whitespace) String() string {
	switch w {
	case WhitespaceIndent:
		return "WhitespaceIndent"
	case WhitespaceCompact:
		return "WhitespaceCompact"
	case WhitespaceFree:
		return "WhitespaceFree"
	}
	return fmt.Sprintf("Whitespace(%d)", int(w))
}

// Valid reports whether w is one of the modes.
func (w Whitespace) Valid() bool { return w >= WhitespaceIndent && w <= WhitespaceFree }

// JSONOption changes how JSON, JSONValue and ParseJSONSchema write their grammar.
type JSONOption func(*jsonOptions)

// jsonOptions are the settings the options change.
type jsonOptions struct {
	ws Whitespace
}

// WithWhitespace sets the whitespace the grammar allows (WhitespaceIndent unless
// set). A value that is not one of the modes makes ParseJSONSchema fail and JSON
// and JSONValue use the default.
func WithWhitespace(w Whitespace) JSONOption {
	return func(o *jsonOptions) { o.ws = w }
}

func newJSONOptions(opts []JSONOption) jsonOptions {
	var o jsonOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// indentLevels is how many nesting levels have their own indent bound.
const indentLevels = 8

// maxDepth is the deepest level whose rules are written: deeper containers use its
// rules. Only the indent mode's rules depend on the level.
func (o jsonOptions) maxDepth() int {
	if o.ws == WhitespaceIndent {
		return indentLevels
	}
	return 0
}

// inner is the level of the values inside a container at level d.
func (o jsonOptions) inner(d int) int { return min(d+1, o.maxDepth()) }

// scalarRules are the GBNF rules of JSON's scalars and of the free blank (ws).
const scalarRules = `
string  ::= "\"" char* "\""
char    ::= [^"\\\x00-\x1F\x7F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
number  ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?
integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
boolean ::= "true" | "false"
null    ::= "null"
ws      ::= ( " " | "\n" [ \t]{0,20} )?
`

// containerRules are the rules of JSON's objects and arrays at level %[1]d, their
// values at level %[2]d.
const containerRules = `
value%[1]d  ::= object%[1]d | array%[1]d | string | number | boolean | null
object%[1]d ::= "{" open%[1]d ( member%[1]d ( pre "," sep%[1]d member%[1]d )* close%[1]d )? "}"
member%[1]d ::= string pre ":" colon value%[2]d
array%[1]d  ::= "[" open%[1]d ( value%[2]d ( pre "," sep%[1]d value%[2]d )* close%[1]d )? "]"
`

// rules writes the GBNF rules of JSON values under o: scalarRules, the blanks
// and the containers of the levels a grammar uses — the rules of any value from
// level anyFrom on (none above maxDepth), blanks to level deepest at least.
func (o jsonOptions) rules(anyFrom, deepest int) string {
	top := min(deepest, o.maxDepth())
	if anyFrom <= o.maxDepth() {
		top = o.maxDepth()
	}
	var b strings.Builder
	b.WriteString(scalarRules)
	b.WriteString(o.blankRules(top))
	for d := anyFrom; d <= o.maxDepth(); d++ {
		fmt.Fprintf(&b, containerRules, d, o.inner(d))
	}
	return b.String()
}

// blankRules writes the blanks: open (after "{" or "["), sep (after ","), close
// (before "}" or "]"), each of a level to top, and colon (after ":"), pre (before ":" and
// ","), tail (after the root value).
func (o jsonOptions) blankRules(top int) string {
	var b strings.Builder
	slot := func(name, body string) { fmt.Fprintf(&b, "%-8s ::= %s\n", name, body) }
	switch o.ws {
	case WhitespaceCompact:
		for _, n := range []string{"colon", "pre", "tail", "open0", "sep0", "close0"} {
			slot(n, `""`)
		}
	case WhitespaceFree:
		for _, n := range []string{"colon", "pre", "tail", "open0", "sep0", "close0"} {
			slot(n, "ws")
		}
	default:
		slot("colon", `" "?`)
		slot("pre", `""`)
		slot("tail", `""`)
		for d := 0; d <= top; d++ {
			slot(fmt.Sprintf("open%d", d), fmt.Sprintf(`( "\n" %s )?`, indent(d+1)))
			slot(fmt.Sprintf("sep%d", d), fmt.Sprintf(`( " " | "\n" %s )?`, indent(d+1)))
			slot(fmt.Sprintf("close%d", d), fmt.Sprintf(`( "\n" %s )?`, indent(d)))
		}
	}
	return b.String()
}

// indent is the GBNF of the indent of a line at a nesting level: up to 2 tabs or up
// to 8 spaces a level.
func indent(level int) string {
	if level == 0 {
		return `""`
	}
	return fmt.Sprintf(`( "\t"{1,%d} | " "{1,%d} )?`, 2*level, 8*level)
}
