package sampler

import "fmt"

// TreeStep is one verification of a tree draft: several candidate continuations that
// share prefixes, verified by the target in one pass.
type TreeStep struct {
	// Tokens is the context before the draft. A rule appends the tokens of the path it
	// walks after it (within the slice's capacity when there is room), so that each
	// level is processed with its own history.
	Tokens []int32
	// Nodes are the drafted tokens; node i hangs below node Parents[i], or below the
	// context when Parents[i] is -1. Parents come before their children.
	Nodes, Parents []int32
	// Q holds, for each node, the distribution it was drawn from (its parent's
	// processed draft distribution), as [Step.Q] does for a chain: a nil row, or a nil
	// Q, is one-hot on the node's token (chosen deterministically). Siblings drawn
	// from q must be independent draws (with replacement) for the exact rule to stay
	// exact; deterministic and sampled siblings may be mixed.
	Q [][]float32
	// Logits holds the target's logits: row 0 after the context, row i+1 after node i.
	Logits [][]float32
}

// TreeRule is a Rule that can also judge tree drafts. VerifyTree appends to path the
// indices of the accepted nodes, root to leaf, and returns it with the token that
// follows them.
type TreeRule interface {
	Rule
	VerifyTree(s *Sampler, st TreeStep, path []int32) ([]int32, int32, error)
}

// VerifyTree judges a tree draft with the sampler's rule, which must be a TreeRule.
func (s *Sampler) VerifyTree(st TreeStep, path []int32) ([]int32, int32, error) {
	n := len(st.Nodes)
	if len(st.Parents) != n || len(st.Logits) < n+1 || (st.Q != nil && len(st.Q) < n) {
		return path, 0, fmt.Errorf("sampler: malformed tree step: %d nodes, %d parents, %d logit rows, %d q rows",
			n, len(st.Parents), len(st.Logits), len(st.Q))
	}
	for i, p := range st.Parents {
		if p < -1 || int(p) >= i {
			return path, 0, fmt.Errorf("sampler: parent %d of tree node %d must be -1 or an earlier node", p, i)
		}
		t := st.Nodes[i]
		if t < 0 || int(t) >= s.vocab {
			return path, 0, fmt.Errorf("sampler: tree node %d has token %d outside the vocabulary [0, %d)", i, t, s.vocab)
		}
		if err := s.checkDraft(draftRow(st.Q, i), t); err != nil {
			return path, 0, fmt.Errorf("sampler: tree node %d: %w", i, err)
		}
	}
	tr, ok := s.rule.(TreeRule)
	if !ok {
		return path, 0, fmt.Errorf("sampler: rule %T cannot verify tree drafts", s.rule)
	}
	start := len(path)
	path, next, err := tr.VerifyTree(s, st, path)
	if err == nil && (next < 0 || int(next) >= s.vocab) {
		err = fmt.Errorf("sampler: rule %T returned next token %d", s.rule, next)
	}
	for i := start; err == nil && i < len(path); i++ {
		want := int32(-1)
		if i > start {
			want = path[i-1]
		}
		if c := path[i]; c < 0 || int(c) >= n || st.Parents[c] != want {
			err = fmt.Errorf("sampler: rule %T returned a path that is not a root path of the tree", s.rule)
		}
	}
	return path, next, err
}

// VerifyTree implements [TreeRule] with multi-round rejection sampling (SpecInfer):
// at each level the children of the last accepted node are tried in order, each
// accepted with probability min(1, p(x)/q(x)) against the target distribution left
// after the rejections before it, p ← norm(max(0, p − q)); when every child is
// rejected the next token is drawn from what is left, and when a leaf is accepted from
// the target distribution after it. The emitted tokens are distributed exactly as the
// target's.
func (Exact) VerifyTree(s *Sampler, st TreeStep, path []int32) ([]int32, int32, error) {
	if s.p.Greedy() {
		return Greedy{}.VerifyTree(s, st, path)
	}
	hist := st.Tokens
	p := s.Scratch()
	cur, row := int32(-1), 0
	for {
		if err := s.Process(st.Logits[row], hist, p); err != nil {
			return path, 0, fmt.Errorf("sampler: tree row %d: %w", row, err)
		}
		accepted := false
		for c := int(cur) + 1; c < len(st.Nodes); c++ {
			if st.Parents[c] != cur {
				continue
			}
			x, q := st.Nodes[c], draftRow(st.Q, c)
			if s.accepts(p, q, x) {
				path = append(path, int32(c))
				hist = append(hist, x)
				cur, row = int32(c), c+1
				accepted = true
				break
			}
			residualInPlace(p, q, x)
		}
		if !accepted {
			return path, s.Sample(p), nil
		}
	}
}

// residualInPlace turns p into norm(max(0, p − q)), q one-hot on x when nil. When
// nothing is left (p and q equal up to rounding) p stays as it was.
func residualInPlace(p, q []float32, x int32) {
	if q == nil {
		if px := p[x]; px < 1 {
			p[x] = 0
			inv := 1 / (1 - px)
			for i := range p {
				p[i] *= inv
			}
		}
		return
	}
	var sum float64
	for i, v := range p {
		if r := residual(q, i, v); r > 0 {
			sum += float64(r)
		}
	}
	if sum <= 0 {
		return
	}
	inv := float32(1 / sum)
	for i, v := range p {
		r := residual(q, i, v)
		if r > 0 {
			p[i] = r * inv
		} else {
			p[i] = 0
		}
	}
}

// VerifyTree implements [TreeRule]: at each level it follows the child whose token
// is the target's argmax, if there is one.
func (Greedy) VerifyTree(s *Sampler, st TreeStep, path []int32) ([]int32, int32, error) {
	hist := st.Tokens
	cur, row := int32(-1), 0
	for {
		a, err := s.Argmax(st.Logits[row], hist)
		if err != nil {
			return path, 0, fmt.Errorf("sampler: tree row %d: %w", row, err)
		}
		next := -1
		for c := int(cur) + 1; c < len(st.Nodes); c++ {
			if st.Parents[c] == cur && st.Nodes[c] == a {
				next = c
				break
			}
		}
		if next < 0 {
			return path, a, nil
		}
		path = append(path, int32(next))
		hist = append(hist, a)
		cur, row = int32(next), next+1
	}
}
