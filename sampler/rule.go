package sampler

import "fmt"

// Step is one verification: a draft — a chain, or a tree of alternative
// continuations sharing prefixes — and the target's logits for it, all from one
// forward pass.
type Step struct {
	// History is the context before the draft: the prompt and the tokens generated so
	// far. A rule appends the tokens of the path it walks after it, within the slice's
	// capacity when there is room (a caller that leaves room allocates nothing), so
	// that each position is processed with its own history.
	History []int32
	// Draft is the draft, checked by [Draft.Set]. The empty draft makes the step plain
	// decoding: one token drawn from the first row of Logits.
	Draft Draft
	// Logits holds the target's raw logits, one row more than the draft has tokens:
	// row 0 after the history, row i+1 after draft token i and its ancestors.
	Logits [][]float32
}

// Rule decides how much of a draft to keep. Verify appends to path the indices of the
// accepted draft tokens, root to leaf — for a chain, 0 to a−1 — and returns it with
// the token that follows them: a correction after a rejection, or a bonus token when
// the path ends in a leaf. A rule may use the sampler's processing, random numbers and
// scratch memory; [Sampler.Verify] checks what it returns.
type Rule interface {
	// Verify judges st with s, appending the accepted path to path; it returns the
	// path and the next token.
	Verify(s *Sampler, st Step, path []int32) ([]int32, int32, error)
}

// Verify judges a draft with the sampler's rule (see [Rule]): it appends the accepted
// path to path and returns it with the token that follows.
func (s *Sampler) Verify(st Step, path []int32) ([]int32, int32, error) {
	n := st.Draft.Len()
	if n > 0 && st.Draft.vocab > s.vocab {
		return path, 0, fmt.Errorf("sampler: draft checked for a vocabulary of %d, the sampler's is %d", st.Draft.vocab, s.vocab)
	}
	if len(st.Logits) < n+1 {
		return path, 0, fmt.Errorf("sampler: malformed step: %d logit rows for a draft of %d tokens", len(st.Logits), n)
	}
	start := len(path)
	path, next, err := s.rule.Verify(s, st, path)
	if err != nil {
		return path, 0, err
	}
	if next < 0 || int(next) >= s.vocab {
		return path, 0, fmt.Errorf("sampler: rule %T returned next token %d, outside the vocabulary [0, %d)", s.rule, next, s.vocab)
	}
	if len(path) < start {
		return path, 0, fmt.Errorf("sampler: rule %T dropped %d indices of the path it was given", s.rule, start-len(path))
	}
	if kept := path[start:]; len(kept) > n || st.Draft.tree.Path(kept) != nil {
		return path, 0, fmt.Errorf("sampler: rule %T returned %v, not a path from the root of a draft of %d tokens", s.rule, kept, n)
	}
	return path, next, nil
}

// Exact is the lossless rejection-sampling rule, in its multi-draft form (SpecInfer):
// at each level the children of the last accepted token are tried in order, child x
// accepted with probability min(1, p(x)/q(x)) against the target distribution p left
// by the rejections before it, p ← norm(max(0, p − q)); when every child is rejected
// the next token is drawn from what is left, and when a leaf is accepted a bonus token
// is drawn from the target distribution after it. The emitted tokens are distributed
// exactly as the target's processed distribution. With greedy parameters it is the
// same as [Greedy].
//
// A chain is the tree with one child per token, and for it the rule is the one of
// Leviathan et al. and Chen et al. (2023): drafted token x at position i is accepted
// with probability min(1, p_i(x)/q_i(x)); at the first rejection the next token is
// drawn from norm(max(0, p_i − q_i)); when all K are accepted a bonus token is drawn
// from p_K.
type Exact struct{}

// Verify implements [Rule].
func (Exact) Verify(s *Sampler, st Step, path []int32) ([]int32, int32, error) {
	if s.p.Greedy() {
		return Greedy{}.Verify(s, st, path)
	}
	d, hist, p := &st.Draft, st.History, s.Scratch()
	for node := -1; ; {
		if err := s.Process(st.Logits[node+1], hist, p); err != nil {
			return path, 0, rowError(node, err)
		}
		c := d.child(node, 0)
		for c >= 0 && !s.accepts(p, d.Row(c), d.tokens[c]) {
			x, q := d.tokens[c], d.Row(c)
			if c = d.child(node, c+1); c < 0 {
				// The last candidate is rejected: draw from the residual at once. For
				// a chain this is the draw from norm(max(0, p − q)).
				return path, s.sampleResidual(p, q, x), nil
			}
			residualInPlace(p, q, x)
		}
		if c < 0 {
			return path, s.Sample(p), nil // a leaf was accepted: the bonus token
		}
		path = append(path, int32(c))
		hist = append(hist, d.tokens[c])
		node = c
	}
}

// rowError names the row of logits that err came from: the one after draft token
// node, or after the history when node is -1.
func rowError(node int, err error) error {
	if node < 0 {
		return fmt.Errorf("sampler: logits after the history: %w", err)
	}
	return fmt.Errorf("sampler: logits after draft position %d: %w", node, err)
}

// accepts decides, with the exact rule, whether to keep drafted token x: with
// probability min(1, p(x)/q(x)), where a nil q is one-hot on x. It draws a random
// number only when p(x) < q(x). ([Draft.Set] has made sure that q(x) > 0; a rule
// reading a row that ends before x reads q(x) as 0.)
func (s *Sampler) accepts(p, q []float32, x int32) bool {
	qx := float32(1)
	if q != nil {
		qx = 0
		if int(x) < len(q) {
			qx = q[x]
		}
	}
	px := p[x]
	return px >= qx || s.rng.Float64()*float64(qx) < float64(px)
}

// sampleResidual draws from norm(max(0, p − q)) after drafted token x was rejected;
// for a nil q (one-hot on x) that is p without x. It may change p.
func (s *Sampler) sampleResidual(p, q []float32, x int32) int32 {
	if q == nil {
		p[x] = 0
		return s.Sample(p)
	}
	return s.SampleResidual(p, q)
}

// residualInPlace turns p into norm(max(0, p − q)), q one-hot on x when nil, for the
// next sibling to be judged against. When nothing is left (p and q equal up to
// rounding) p stays as it was.
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

// Greedy accepts drafted tokens while each is the target's argmax — at each level of
// a tree, the first child that is — and returns the target's argmax after the last
// one accepted. It ignores q and temperature; the output is identical to plain greedy
// decoding.
type Greedy struct{}

// Verify implements [Rule].
func (Greedy) Verify(s *Sampler, st Step, path []int32) ([]int32, int32, error) {
	d, hist := &st.Draft, st.History
	for node := -1; ; {
		a, err := s.Argmax(st.Logits[node+1], hist)
		if err != nil {
			return path, 0, rowError(node, err)
		}
		c := d.child(node, 0)
		for c >= 0 && d.tokens[c] != a {
			c = d.child(node, c+1)
		}
		if c < 0 {
			return path, a, nil
		}
		path = append(path, int32(c))
		hist = append(hist, a)
		node = c
	}
}
