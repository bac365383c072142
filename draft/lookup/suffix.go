package lookup

import (
	"context"
	"fmt"
	"sync"

	"github.com/specula/specula/draft"
)

// Suffix drafts from what came before, SuffixDecoding-style: a suffix trie of bounded
// depth over the request's own tokens (prompt and output so far) and, when a Memory is
// given, over earlier requests. Each step it finds the longest suffix of the history
// that occurred before and proposes its most frequent continuation — a chain, or with
// Width > 1 a small tree of the most likely continuations, best first by their
// empirical probability. Drafts are deterministic.
type Suffix struct {
	// Depth bounds matched suffix plus continuation (default 32).
	Depth int
	// MaxMatch bounds the length of the matched suffix (default Depth/2).
	MaxMatch int
	// Width, when above 1, makes tree drafts of up to Width children per node.
	Width int
	// MinProb stops a draft where the continuation's empirical probability falls
	// below it (default 0.1).
	MinProb float64
	// Memory, when set, holds earlier requests; sessions read it and add their
	// finished requests to it. It may be shared by many drafters and requests.
	Memory *SuffixMemory
}

func (s Suffix) withDefaults() (Suffix, error) {
	if s.Depth == 0 {
		s.Depth = 32
	}
	if s.MaxMatch == 0 {
		s.MaxMatch = s.Depth / 2
	}
	if s.Width == 0 {
		s.Width = 1
	}
	if s.MinProb == 0 {
		s.MinProb = 0.1
	}
	if s.Depth < 2 || s.Depth > 1024 || s.MaxMatch < 1 || s.MaxMatch >= s.Depth || s.Width < 1 || s.Width > 16 || s.MinProb < 0 || s.MinProb > 1 {
		return s, fmt.Errorf("lookup: suffix drafter %+v: need 2 <= Depth <= 1024, 1 <= MaxMatch < Depth, 1 <= Width <= 16, 0 <= MinProb <= 1", s)
	}
	return s, nil
}

// Start implements [draft.Drafter].
func (s Suffix) Start(ctx context.Context, req draft.Request) (draft.Session, error) {
	s, err := s.withDefaults()
	if err != nil {
		return nil, err
	}
	return &suffixSession{cfg: s, local: newTrie(s.Depth), vocab: int32(req.VocabSize)}, nil
}

// trie is a suffix trie of bounded depth: every window of Depth tokens of the text is
// a path from the root, and each node counts how often its path occurred. Children are
// kept as linked lists: branching is small.
type trie struct {
	depth  int
	nodes  []trieNode // nodes[0] is the root
	active []int32    // nodes of the suffixes of the text so far, shortest last
}

type trieNode struct {
	token       int32
	count       int32
	first, next int32 // first child, next sibling (0: none)
}

func newTrie(depth int) *trie {
	return &trie{depth: depth, nodes: []trieNode{{}}}
}

func (t *trie) child(n int32, tok int32) int32 {
	for c := t.nodes[n].first; c != 0; c = t.nodes[c].next {
		if t.nodes[c].token == tok {
			return c
		}
	}
	return 0
}

func (t *trie) addChild(n int32, tok int32) int32 {
	c := t.child(n, tok)
	if c == 0 {
		c = int32(len(t.nodes))
		t.nodes = append(t.nodes, trieNode{token: tok, next: t.nodes[n].first})
		t.nodes[n].first = c
	}
	t.nodes[c].count++
	return c
}

// push appends one token to the text: every suffix shorter than depth grows by it.
func (t *trie) push(tok int32) {
	t.active = append(t.active, 0) // the empty suffix, about to become [tok]
	for i, n := range t.active {
		t.active[i] = t.addChild(n, tok)
	}
	if len(t.active) > t.depth-1 { // drop the longest
		t.active = append(t.active[:0], t.active[len(t.active)-(t.depth-1):]...)
	}
}

// reset forgets the text being appended (not the counts): the next push starts a new
// text, as a new request does.
func (t *trie) reset() { t.active = t.active[:0] }

// match returns the node of the longest suffix of h (at most maxLen tokens) that occurs
// in the trie with a continuation, and its length.
func (t *trie) match(h []int32, maxLen int) (int32, int) {
	for m := min(maxLen, len(h), t.depth-1); m >= 1; m-- {
		n := int32(0)
		for _, tok := range h[len(h)-m:] {
			if n = t.child(n, tok); n == 0 {
				break
			}
		}
		if n != 0 && t.nodes[n].first != 0 {
			return n, m
		}
	}
	return 0, 0
}

// SuffixMemory is a bounded, thread-safe store of earlier requests for Suffix
// drafters: the most recent requests up to a token budget, and their suffix trie.
type SuffixMemory struct {
	mu       sync.RWMutex
	depth    int
	budget   int
	requests [][]int32
	tokens   int
	t        *trie
}

// NewSuffixMemory returns a memory that keeps the most recent requests of at most
// maxTokens tokens in all, indexed depth tokens deep (0: 32).
func NewSuffixMemory(maxTokens, depth int) *SuffixMemory {
	if depth <= 1 {
		depth = 32
	}
	return &SuffixMemory{depth: depth, budget: max(maxTokens, 1), t: newTrie(depth)}
}

// Add remembers a finished request's tokens, forgetting the oldest requests when the
// budget is exceeded.
func (m *SuffixMemory) Add(tokens []int32) {
	if len(tokens) == 0 {
		return
	}
	toks := append([]int32(nil), tokens[max(0, len(tokens)-m.budget):]...)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests = append(m.requests, toks)
	m.tokens += len(toks)
	if m.tokens <= m.budget {
		m.t.reset()
		for _, tok := range toks {
			m.t.push(tok)
		}
		return
	}
	for m.tokens > m.budget {
		m.tokens -= len(m.requests[0])
		m.requests = m.requests[1:]
	}
	// Counts cannot be taken back: rebuild from what is kept.
	m.t = newTrie(m.depth)
	for _, r := range m.requests {
		m.t.reset()
		for _, tok := range r {
			m.t.push(tok)
		}
	}
}

// Tokens is the number of tokens remembered.
func (m *SuffixMemory) Tokens() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.tokens
}

type suffixSession struct {
	cfg   Suffix
	local *trie
	seen  int
	vocab int32 // tokens at or above it are never proposed (0: no limit)
	// Scratch for drafting.
	cand    []candidate
	top     []int32
	parents []int32
	toks    []int32
}

type candidate struct {
	node   int32
	parent int32 // index in the proposal, -1 for the root
	prob   float64
}

func (s *suffixSession) Propose(ctx context.Context, history []int32, k int, p *draft.Proposal) error {
	p.Reset()
	for _, tok := range history[s.seen:] {
		s.local.push(tok)
	}
	s.seen = len(history)
	if k <= 0 {
		return nil
	}
	// The longest match wins; on a tie the request's own text does.
	t, node, m := s.local, int32(0), 0
	if s.local.nodes[0].first != 0 {
		node, m = s.local.match(history, s.cfg.MaxMatch)
	}
	if mem := s.cfg.Memory; mem != nil {
		mem.mu.RLock()
		defer mem.mu.RUnlock()
		if mn, mm := mem.t.match(history, min(s.cfg.MaxMatch, mem.depth-1)); mm > m {
			t, node, m = mem.t, mn, mm
		}
	}
	if m == 0 {
		return nil
	}
	p.Tokens = s.toks[:0]
	s.draft(t, node, min(k, t.depth-1-m), p)
	s.toks = p.Tokens
	return nil
}

// draft expands the continuations below node best first by empirical probability —
// each expanded node gets its Width most frequent continuations — until k tokens, or
// until what is left is less likely than MinProb (the most frequent first token is
// always proposed).
func (s *suffixSession) draft(t *trie, node int32, k int, p *draft.Proposal) {
	s.cand = append(s.cand[:0], candidate{node: node, parent: -1, prob: 1})
	s.parents = s.parents[:0]
	for len(p.Tokens) < k && len(s.cand) > 0 {
		bi := 0
		for i := range s.cand {
			if s.cand[i].prob > s.cand[bi].prob {
				bi = i
			}
		}
		c := s.cand[bi]
		s.cand[bi] = s.cand[len(s.cand)-1]
		s.cand = s.cand[:len(s.cand)-1]
		var total float64
		for ch := t.nodes[c.node].first; ch != 0; ch = t.nodes[ch].next {
			total += float64(t.nodes[ch].count)
		}
		// The Width most frequent children, in order; ties to the most recent.
		s.top = s.top[:0]
		for ch := t.nodes[c.node].first; ch != 0; ch = t.nodes[ch].next {
			if s.vocab > 0 && t.nodes[ch].token >= s.vocab {
				continue // a memory shared with another vocabulary
			}
			i := len(s.top)
			if i == s.cfg.Width {
				if t.nodes[ch].count <= t.nodes[s.top[i-1]].count {
					continue
				}
				i--
				s.top = s.top[:i]
			}
			s.top = append(s.top, ch)
			for ; i > 0 && t.nodes[s.top[i]].count > t.nodes[s.top[i-1]].count; i-- {
				s.top[i], s.top[i-1] = s.top[i-1], s.top[i]
			}
		}
		for _, ch := range s.top {
			prob := c.prob * float64(t.nodes[ch].count) / total
			if len(p.Tokens) == k || (prob < s.cfg.MinProb && len(p.Tokens) > 0) {
				break
			}
			p.Tokens = append(p.Tokens, t.nodes[ch].token)
			s.parents = append(s.parents, c.parent)
			s.cand = append(s.cand, candidate{node: ch, parent: int32(len(p.Tokens) - 1), prob: prob})
		}
	}
	if s.cfg.Width > 1 {
		p.Parents = s.parents
	}
}

// Learn adds the finished request to the memory.
func (s *suffixSession) Learn(history []int32) {
	if s.cfg.Memory != nil {
		s.cfg.Memory.Add(history)
	}
}

func (s *suffixSession) Close() error { return nil }
