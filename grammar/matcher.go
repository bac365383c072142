package grammar

import (
	"math"
	"slices"
	"sync"

	"github.com/specula/specula/tokenizer"
)

// Vocab is a vocabulary as the matcher reads it: the bytes of each token, in a trie,
// and the end-of-sequence tokens. Tokens without bytes and special tokens (other than
// end-of-sequence) are never allowed. It is immutable and safe for concurrent use;
// make one per tokenizer and share it.
type Vocab struct {
	size  int
	strip bool // the first token's leading space is not written (SentencePiece)
	eos   []int32
	nodes []trieNode
	edges []trieEdge
	toks  []int32 // the tokens ending at each node, node by node
}

type trieNode struct {
	edge, nedges int32 // children: edges[edge : edge+nedges], by byte
	tok, ntoks   int32 // tokens ending here: toks[tok : tok+ntoks]
}

type trieEdge struct {
	b     byte
	child int32
}

// TokenizerVocab reads a tokenizer's vocabulary: each token's bytes as decoded text
// holds them, special tokens left out but for the end-of-sequence ones.
func TokenizerVocab(tok *tokenizer.Tokenizer) *Vocab {
	pieces := make([]string, tok.VocabSize())
	for id := range pieces {
		if tok.IsSpecial(int32(id)) {
			continue
		}
		pieces[id], _ = tok.Piece(int32(id))
	}
	v := NewVocab(pieces, tok.EOS())
	v.strip = tok.StripsLeadingSpace()
	return v
}

// NewVocab makes a vocabulary of the given token bytes ("" for a token never
// allowed) and end-of-sequence tokens.
func NewVocab(pieces []string, eos []int32) *Vocab {
	type building struct {
		kids map[byte]int
		toks []int32
	}
	tree := []building{{kids: map[byte]int{}}}
	for id, p := range pieces {
		if p == "" || slices.Contains(eos, int32(id)) {
			continue
		}
		n := 0
		for i := 0; i < len(p); i++ {
			k, ok := tree[n].kids[p[i]]
			if !ok {
				tree = append(tree, building{kids: map[byte]int{}})
				k = len(tree) - 1
				tree[n].kids[p[i]] = k
			}
			n = k
		}
		tree[n].toks = append(tree[n].toks, int32(id))
	}
	v := &Vocab{size: len(pieces), eos: slices.Clone(eos), nodes: make([]trieNode, len(tree))}
	for i, b := range tree {
		bytes := make([]byte, 0, len(b.kids))
		for c := range b.kids {
			bytes = append(bytes, c)
		}
		slices.Sort(bytes)
		v.nodes[i] = trieNode{edge: int32(len(v.edges)), nedges: int32(len(bytes)), tok: int32(len(v.toks)), ntoks: int32(len(b.toks))}
		for _, c := range bytes {
			v.edges = append(v.edges, trieEdge{c, int32(b.kids[c])})
		}
		v.toks = append(v.toks, b.toks...)
	}
	return v
}

// Size is the number of tokens.
func (v *Vocab) Size() int { return v.size }

// Mask is a set of tokens: those allowed in a state.
type Mask struct {
	bits []uint64
	n    int
}

// Allowed reports whether tok is in the set.
func (m *Mask) Allowed(tok int32) bool {
	return tok >= 0 && int(tok) < len(m.bits)*64 && m.bits[tok>>6]&(1<<(tok&63)) != 0
}

// Count is the number of tokens in the set.
func (m *Mask) Count() int { return m.n }

// Apply sets the logits of every token outside the set to −∞ (those past the
// vocabulary too: a model's table padded beyond its tokenizer's).
func (m *Mask) Apply(logits []float32) {
	inf := float32(math.Inf(-1))
	for i := len(m.bits) * 64; i < len(logits); i++ {
		logits[i] = inf
	}
	for w, word := range m.bits {
		if word == math.MaxUint64 {
			continue
		}
		base := w * 64
		for i := range min(64, len(logits)-base) {
			if word&(1<<i) == 0 {
				logits[base+i] = inf
			}
		}
	}
}

func (m *Mask) set(tok int32) {
	if m.bits[tok>>6]&(1<<(tok&63)) == 0 {
		m.bits[tok>>6] |= 1 << (tok & 63)
		m.n++
	}
}

// Matcher is a grammar matched against a vocabulary: states advance by tokens, and
// each state gives the set of tokens that may follow, computed once per state by one
// walk of the vocabulary's trie (a subtree is left as soon as the grammar refuses its
// prefix) and cached. It is safe for concurrent use; a compiled grammar serves many
// requests through one matcher.
type Matcher struct {
	g *Grammar
	p *parser
	v *Vocab

	mu     sync.Mutex
	masks  map[State]*Mask
	next   map[[2]int32]State // (state, token) → state
	pieces [][]byte           // the bytes of each token, for Next
	cached int                // bytes of masks held
}

// maxMaskBytes bounds the masks a matcher caches; past it the cache starts again.
const maxMaskBytes = 256 << 20

// NewMatcher matches g against v.
func NewMatcher(g *Grammar, v *Vocab) *Matcher {
	m := &Matcher{g: g, p: newParser(g), v: v, masks: map[State]*Mask{}, next: map[[2]int32]State{}}
	m.pieces = make([][]byte, v.size)
	var walk func(n int32, prefix []byte)
	walk = func(n int32, prefix []byte) {
		nd := v.nodes[n]
		for _, t := range v.toks[nd.tok : nd.tok+nd.ntoks] {
			m.pieces[t] = slices.Clone(prefix)
		}
		for _, e := range v.edges[nd.edge : nd.edge+nd.nedges] {
			walk(e.child, append(prefix, e.b))
		}
	}
	walk(0, nil)
	return m
}

// firstToken marks a state in which the first token of the output comes, for a
// vocabulary whose first token's leading space is not written: that token is judged
// without it.
const firstToken State = 1 << 30

// split separates a state from its first-token mark.
func split(s State) (State, bool) {
	if s >= 0 && s&firstToken != 0 {
		return s &^ firstToken, true
	}
	return s, false
}

// Start is the state before any output.
func (m *Matcher) Start() State {
	s := m.p.start()
	if m.v.strip && s >= 0 {
		s |= firstToken
	}
	return s
}

// Next is the state after tok in state s, or Dead when the grammar does not allow
// it there. An end-of-sequence token is allowed where the grammar accepts, and leaves
// the state as it is.
func (m *Matcher) Next(s State, tok int32) State {
	if s < 0 || tok < 0 || int(tok) >= m.v.size {
		return Dead
	}
	base, first := split(s)
	if slices.Contains(m.v.eos, tok) {
		if m.p.accepting(base) {
			return s
		}
		return Dead
	}
	m.mu.Lock()
	t, ok := m.next[[2]int32{s, tok}]
	m.mu.Unlock()
	if ok {
		return t
	}
	piece := m.pieces[tok]
	if first && len(piece) > 0 && piece[0] == ' ' {
		piece = piece[1:] // not written: the decoder drops it
	}
	t = Dead
	if len(piece) > 0 {
		t = m.p.advanceString(base, string(piece))
	}
	m.mu.Lock()
	m.next[[2]int32{s, tok}] = t
	m.mu.Unlock()
	return t
}

// Accepting reports whether the output that led to s is a sentence of the grammar
// (the end-of-sequence tokens are allowed there).
func (m *Matcher) Accepting(s State) bool {
	base, _ := split(s)
	return m.p.accepting(base)
}

// Mask returns the tokens allowed in state s (shared: do not change it).
func (m *Matcher) Mask(s State) *Mask {
	m.mu.Lock()
	mk, ok := m.masks[s]
	m.mu.Unlock()
	if ok {
		return mk
	}
	mk = m.compute(s)
	m.mu.Lock()
	if m.cached += 8 * len(mk.bits); m.cached > maxMaskBytes {
		clear(m.masks)
		m.cached = 8 * len(mk.bits)
	}
	m.masks[s] = mk
	m.mu.Unlock()
	return mk
}

// compute walks the trie from state s, keeping the tokens whose bytes the grammar
// allows.
func (m *Matcher) compute(s State) *Mask {
	mk := &Mask{bits: make([]uint64, (m.v.size+63)/64)}
	if s < 0 {
		return mk
	}
	s, first := split(s)
	p := m.p
	p.mu.Lock()
	type item struct {
		node  int32
		state State
	}
	todo := []item{{0, s}}
	for len(todo) > 0 {
		it := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		nd := m.v.nodes[it.node]
		for _, e := range m.v.edges[nd.edge : nd.edge+nd.nedges] {
			if first && it.node == 0 && e.b == ' ' {
				// The first token's leading space is not written: below it the
				// walk goes on from s itself (a token of a space alone writes
				// nothing, and is not allowed).
				todo = append(todo, item{e.child, s})
				continue
			}
			ns := p.advanceLocked(it.state, e.b)
			if ns < 0 {
				continue
			}
			child := m.v.nodes[e.child]
			for _, t := range m.v.toks[child.tok : child.tok+child.ntoks] {
				mk.set(t)
			}
			if child.nedges > 0 {
				todo = append(todo, item{e.child, ns})
			}
		}
	}
	accept := p.known(s) && p.states[s].accept
	p.mu.Unlock()
	if accept {
		for _, t := range m.v.eos {
			if int(t) < m.v.size {
				mk.set(t)
			}
		}
	}
	return mk
}

// MaskLogits sets the logits of the tokens not allowed in state s to −∞, and reports
// whether any token is allowed: the decoder's use of a matcher (sampler.Constraint).
func (m *Matcher) MaskLogits(s State, logits []float32) bool {
	mk := m.Mask(s)
	mk.Apply(logits)
	return mk.n > 0
}

// Matches reports whether the grammar accepts text whole, for tests and for checking
// outputs.
func (g *Grammar) Matches(text string) bool {
	p := newParser(g)
	return p.accepting(p.advanceString(p.start(), text))
}

// maxStates is how many parser states a matcher makes before Large says it should be
// replaced: states and their memoised transitions are never forgotten (requests under
// way hold them), so a long-running service starts a fresh matcher instead.
const maxStates = 1 << 18

// Large reports whether the matcher has grown past what a cache should keep.
func (m *Matcher) Large() bool {
	states, _ := m.Stats()
	m.mu.Lock()
	defer m.mu.Unlock()
	return states > maxStates || len(m.next) > 4*maxStates
}

// Stats reports how many parser states and cached masks the matcher holds.
func (m *Matcher) Stats() (states, masks int) {
	m.p.mu.Lock()
	states = len(m.p.states)
	m.p.mu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	return states, len(m.masks)
}
