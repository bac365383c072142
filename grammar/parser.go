package grammar

import (
	"slices"
	"strconv"
	"strings"
	"sync"
)

// State is a parser state: where in the grammar the bytes so far may be. States are
// numbered by the parser that made them; Dead is no state (the bytes left the
// language).
type State = int32

// Dead is the state of bytes the grammar does not allow.
const Dead State = -1

// parser runs a grammar byte by byte as llama.cpp does: a state is a set of stacks of
// grammar positions, the top of each a byte set (or the stack empty: the root is
// complete). Stacks and states are interned, and each state's transitions memoised,
// so a byte already seen in a state costs one array read. It is safe for concurrent
// use.
type parser struct {
	g *Grammar

	mu       sync.Mutex
	nodes    []stackNode         // node 0: the empty stack
	nodeID   map[stackNode]int32 // interning
	expanded map[int32][]int32   // a node's normalised stacks (tops on bytes, or 0)
	states   []stateData
	stateID  map[string]State
}

// stackNode is a stack: the position on top and the stack below.
type stackNode struct {
	pos    int32
	parent int32
}

type stateData struct {
	stacks []int32     // sorted node ids
	next   *[256]State // transitions, filled lazily: 0 unknown, else the state + 2 (Dead is 1)
	accept bool        // a stack is empty: the input so far is a sentence
}

func newParser(g *Grammar) *parser {
	p := &parser{g: g, nodes: []stackNode{{-1, -1}}, nodeID: map[stackNode]int32{}, expanded: map[int32][]int32{},
		stateID: map[string]State{}}
	return p
}

// start is the state before any byte.
func (p *parser) start() State {
	p.mu.Lock()
	defer p.mu.Unlock()
	var stacks []int32
	for _, a := range p.g.alts[p.g.root] {
		stacks = append(stacks, p.expand(p.node(int32(a), 0))...)
	}
	return p.intern(stacks)
}

// node interns the stack of pos on top of parent.
func (p *parser) node(pos, parent int32) int32 {
	k := stackNode{pos, parent}
	if id, ok := p.nodeID[k]; ok {
		return id
	}
	p.nodes = append(p.nodes, k)
	id := int32(len(p.nodes) - 1)
	p.nodeID[k] = id
	return id
}

// expand normalises a stack: rules on top are replaced by their alternatives, ended
// alternatives popped, until every stack's top is a byte set or the stack is empty.
func (p *parser) expand(n int32) []int32 {
	if out, ok := p.expanded[n]; ok {
		return out
	}
	var out []int32
	if n == 0 {
		out = []int32{0}
	} else {
		nd := p.nodes[n]
		e := p.g.elems[nd.pos]
		switch e.kind {
		case kBytes:
			out = []int32{n}
		case kEnd:
			out = p.expand(nd.parent)
		case kRule:
			// What follows the rule; a rule last in its alternative continues with
			// the parent directly (a tail call), so that right recursion — every
			// repetition — keeps the stack as it is instead of growing it.
			cont := nd.parent
			if p.g.elems[nd.pos+1].kind != kEnd {
				cont = p.node(nd.pos+1, nd.parent)
			}
			for _, a := range p.g.alts[e.arg] {
				out = append(out, p.expand(p.node(int32(a), cont))...)
			}
		}
	}
	out = dedupe(out)
	p.expanded[n] = out
	return out
}

func dedupe(xs []int32) []int32 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return slices.Compact(xs)
}

// intern returns the state of a set of normalised stacks (Dead for none).
func (p *parser) intern(stacks []int32) State {
	if len(stacks) == 0 {
		return Dead
	}
	stacks = dedupe(stacks)
	var key strings.Builder
	for _, s := range stacks {
		key.WriteString(strconv.Itoa(int(s)))
		key.WriteByte(',')
	}
	if id, ok := p.stateID[key.String()]; ok {
		return id
	}
	st := stateData{stacks: stacks, accept: stacks[0] == 0}
	p.states = append(p.states, st)
	id := State(len(p.states) - 1)
	p.stateID[key.String()] = id
	return id
}

// advance is the state after byte c in state s (Dead when the grammar forbids it).
func (p *parser) advance(s State, c byte) State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.advanceLocked(s, c)
}

func (p *parser) advanceLocked(s State, c byte) State {
	if !p.known(s) {
		return Dead
	}
	st := &p.states[s]
	if st.next == nil {
		st.next = new([256]State)
	}
	if t := st.next[c]; t != 0 {
		return t - 2
	}
	var out []int32
	for _, n := range st.stacks {
		if n == 0 {
			continue
		}
		nd := p.nodes[n]
		if p.g.sets[p.g.elems[nd.pos].arg].has(c) {
			out = append(out, p.expand(p.node(nd.pos+1, nd.parent))...)
		}
	}
	t := p.intern(out)
	p.states[s].next[c] = t + 2 // p.states may have grown: index again
	return t
}

// accepting reports whether the bytes that led to s are a sentence of the grammar.
func (p *parser) accepting(s State) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.known(s) && p.states[s].accept
}

// known reports whether s is a state of this parser (under mu).
func (p *parser) known(s State) bool { return s >= 0 && int(s) < len(p.states) }

// advanceString runs the bytes of s from state st.
func (p *parser) advanceString(st State, s string) State {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := 0; i < len(s) && st >= 0; i++ {
		st = p.advanceLocked(st, s[i])
	}
	return st
}
