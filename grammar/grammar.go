// Package grammar constrains generation to a formal language: a context-free grammar
// in llama.cpp's GBNF, a regular expression, any JSON value, or a JSON Schema — all
// compiled to one byte-level grammar — matched token by token against a tokenizer's
// vocabulary.
//
// A [Grammar] is the compiled language; [NewMatcher] pairs it with a [Vocab] (the
// byte strings of a tokenizer's tokens, in a trie) and gives, for each parser state,
// the set of tokens that may come next — the end-of-sequence tokens exactly where the
// language accepts — cached per state. The decoder masks the target's logits (and the
// drafters') with those sets, so constrained decoding samples the target's own
// distribution restricted to the language and renormalised.
//
// The grammar is matched on bytes, not characters: character classes are compiled to
// the UTF-8 byte sequences of their code points, so a token that holds part of a
// character (byte-fallback or byte-level BPE pieces) is judged by the bytes it adds.
// The parser is llama.cpp's: a set of stacks of grammar positions, advanced byte by
// byte; rules may recurse, but not on their left.
package grammar

import (
	"errors"
	"fmt"
)

// Grammar is a compiled byte-level context-free grammar. It is immutable and safe for
// concurrent use.
type Grammar struct {
	elems []elem  // every alternative's elements, each alternative ended by kEnd
	sets  []bset  // the byte sets of the kBytes elements
	alts  [][]int // per rule, the position of each alternative's first element
	root  int
}

// elemKind says what a grammar position holds.
type elemKind uint8

const (
	kEnd   elemKind = iota // the end of an alternative
	kBytes                 // one byte from a set
	kRule                  // a rule's expansion
)

type elem struct {
	kind elemKind
	arg  int32 // the set (kBytes) or the rule (kRule)
}

// bset is a set of bytes.
type bset [4]uint64

func (s *bset) add(lo, hi byte) {
	for b := int(lo); b <= int(hi); b++ {
		s[b>>6] |= 1 << (b & 63)
	}
}

func (s *bset) has(b byte) bool { return s[b>>6]&(1<<(b&63)) != 0 }

// builder assembles rules; the front ends (GBNF, regular expressions, JSON Schema)
// write into one.
type builder struct {
	size   int   // elements written, bounded by maxElems
	err    error // the first error a front end cannot return at once (too large)
	rules  []ruleDef
	byName map[string]int
	sets   []bset
	setID  map[bset]int32
}

// ruleDef is a rule under construction: alternatives of elements.
type ruleDef struct {
	name    string
	alts    [][]elem
	defined bool
	at      string // where it is first referred to, for "undefined rule" errors
}

func newBuilder() *builder {
	return &builder{byName: map[string]int{}, setID: map[bset]int32{}}
}

// rule returns the index of the named rule, making it (undefined) if it is new.
func (b *builder) rule(name, at string) int {
	if i, ok := b.byName[name]; ok {
		return i
	}
	b.rules = append(b.rules, ruleDef{name: name, at: at})
	b.byName[name] = len(b.rules) - 1
	return len(b.rules) - 1
}

// anon makes a rule of the given alternatives, named after its parent.
func (b *builder) anon(parent string, alts ...[]elem) int {
	name := fmt.Sprintf("%s_%d", parent, len(b.rules))
	i := b.rule(name, "")
	b.rules[i].alts, b.rules[i].defined = alts, true
	return i
}

func (b *builder) set(s bset) elem {
	id, ok := b.setID[s]
	if !ok {
		id = int32(len(b.sets))
		b.sets = append(b.sets, s)
		b.setID[s] = id
	}
	return elem{kind: kBytes, arg: id}
}

func ref(rule int) elem { return elem{kind: kRule, arg: int32(rule)} }

// literal is the elements of a byte string.
func (b *builder) literal(s string) []elem {
	b.grow(len(s))
	out := make([]elem, 0, len(s))
	for i := 0; i < len(s); i++ {
		var set bset
		set.add(s[i], s[i])
		out = append(out, b.set(set))
	}
	return out
}

// class is an element matching one character of the code point ranges (a rule of
// their UTF-8 byte sequences, or one byte set when they are all ASCII).
func (b *builder) class(parent string, ranges []runeRange) elem {
	seqs := utf8Sequences(ranges)
	if len(seqs) == 1 && len(seqs[0]) == 1 {
		return b.set(seqs[0][0])
	}
	alts := make([][]elem, len(seqs))
	for i, seq := range seqs {
		for _, s := range seq {
			alts[i] = append(alts[i], b.set(s))
		}
	}
	return ref(b.anon(parent, alts...))
}

// maxElems bounds a grammar's size: the text of a request must not be able to
// allocate without limit ("x"{10000}{10000}).
const maxElems = 1 << 20

// grow counts n more elements, reporting false (and recording the error) past
// maxElems.
func (b *builder) grow(n int) bool {
	if b.size += n; b.size > maxElems && b.err == nil {
		b.err = fmt.Errorf("%w: the grammar is too large (over %d elements once repetitions are written out)", ErrSyntax, maxElems)
	}
	return b.err == nil
}

// repeat is the elements of x repeated lo to hi times (hi < 0: no bound).
func (b *builder) repeat(parent string, x []elem, lo, hi int) []elem {
	if !b.grow(len(x) * (lo + max(hi-lo, 1))) {
		return nil
	}
	var out []elem
	for range lo {
		out = append(out, x...)
	}
	switch {
	case hi < 0: // x*: r ::= x r | ε
		r := b.anon(parent)
		b.rules[r].alts = [][]elem{append(append([]elem(nil), x...), ref(r)), nil}
		return append(out, ref(r))
	case hi > lo: // (x (x (…)?)?)?
		var tail []elem
		for range hi - lo {
			r := b.anon(parent, append(append([]elem(nil), x...), tail...), nil)
			tail = []elem{ref(r)}
		}
		return append(out, tail...)
	}
	return out
}

// compile checks the rules — every one referred to is defined, none recurses on its
// left — and lays them out for the parser.
func (b *builder) compile(root string) (*Grammar, error) {
	if b.err != nil {
		return nil, b.err
	}
	ri, ok := b.byName[root]
	if !ok {
		return nil, fmt.Errorf("%w: no rule %q", ErrSyntax, root)
	}
	for _, r := range b.rules {
		if !r.defined {
			return nil, fmt.Errorf("%w: %s: rule %q is used but not defined", ErrSyntax, r.at, r.name)
		}
	}
	if err := b.checkLeftRecursion(); err != nil {
		return nil, err
	}
	g := &Grammar{sets: b.sets, root: ri, alts: make([][]int, len(b.rules))}
	for i, r := range b.rules {
		for _, a := range r.alts {
			g.alts[i] = append(g.alts[i], len(g.elems))
			g.elems = append(g.elems, a...)
			g.elems = append(g.elems, elem{kind: kEnd})
		}
	}
	return g, nil
}

// checkLeftRecursion refuses a rule that can reach itself before consuming a byte:
// the stack parser would expand it forever.
func (b *builder) checkLeftRecursion() error {
	nullable := make([]bool, len(b.rules))
	for changed := true; changed; {
		changed = false
		for i, r := range b.rules {
			if nullable[i] {
				continue
			}
			for _, a := range r.alts {
				if b.seqNullable(a, nullable) {
					nullable[i], changed = true, true
					break
				}
			}
		}
	}
	// left[i] lists the rules rule i may expand first.
	state := make([]uint8, len(b.rules)) // 0 new, 1 on the path, 2 done
	var visit func(i int) error
	visit = func(i int) error {
		state[i] = 1
		for _, a := range b.rules[i].alts {
			for _, e := range a {
				if e.kind != kRule {
					break
				}
				j := int(e.arg)
				switch state[j] {
				case 1:
					return fmt.Errorf("%w: rule %q is left-recursive (it can reach itself through %q before reading anything): rewrite it with repetition", ErrSyntax, b.rules[j].name, b.rules[i].name)
				case 0:
					if err := visit(j); err != nil {
						return err
					}
				}
				if !nullable[j] {
					break
				}
			}
		}
		state[i] = 2
		return nil
	}
	for i := range b.rules {
		if state[i] == 0 {
			if err := visit(i); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b *builder) seqNullable(a []elem, nullable []bool) bool {
	for _, e := range a {
		if e.kind != kRule || !nullable[e.arg] {
			return false
		}
	}
	return true
}

// ErrSyntax is wrapped by every error about the text of a grammar, regular expression
// or schema: its syntax, a rule used and not defined or recursing on its left, a
// keyword not supported, a grammar too large.
var ErrSyntax = errors.New("grammar: syntax error")
