package sampler

import (
	"fmt"
	"math"
)

// Step is one verification of a chain draft.
type Step struct {
	// Tokens is the context followed by the K drafted tokens; the distributions of
	// drafted token i are processed with history Tokens[:len(Tokens)-K+i].
	Tokens []int32
	// K is the number of drafted tokens at the end of Tokens; 0 is a plain decoding
	// step.
	K int
	// Q holds, for each drafted token, the distribution q the drafter drew it from (the
	// drafter's processed distribution). A nil row means the token was chosen
	// deterministically: q is one-hot on it, so it is kept with probability p(x). A nil
	// Q means every row is nil; deterministic and sampled tokens may be mixed in one
	// draft. A row may be shorter than the vocabulary (a draft model whose vocabulary
	// is the target's, padded): the missing entries are 0. A row must be a
	// distribution (non-negative, summing to 1) that gives the drafted token a
	// positive probability; [Sampler.Verify] rejects one that does not.
	Q [][]float32
	// Logits holds the target's raw logits for the K+1 positions: after the context,
	// and after each drafted token.
	Logits [][]float32
}

// Rule decides how much of a draft to keep. Verify returns the number of drafted tokens
// accepted, 0 to K, and the token that follows them: a correction after a rejection, or
// a bonus token when every drafted token was accepted. A rule may use the sampler's
// processing, random numbers and scratch memory.
type Rule interface {
	Verify(s *Sampler, st Step) (accepted int, next int32, err error)
}

// Exact is the lossless rejection-sampling rule. Drafted token x at position i is
// accepted with probability min(1, p_i(x)/q_i(x)); at the first rejection the next
// token is drawn from norm(max(0, p_i − q_i)); when all K are accepted a bonus token is
// drawn from p_K. The emitted tokens are distributed exactly as the target's processed
// distribution. With greedy parameters it is the same as [Greedy].
type Exact struct{}

// Verify implements [Rule].
func (Exact) Verify(s *Sampler, st Step) (int, int32, error) {
	if s.p.Greedy() {
		return Greedy{}.Verify(s, st)
	}
	base := len(st.Tokens) - st.K
	p := s.Scratch()
	for i := range st.K {
		if err := s.Process(st.Logits[i], st.Tokens[:base+i], p); err != nil {
			return 0, 0, fmt.Errorf("sampler: draft position %d: %w", i, err)
		}
		x, q := st.Tokens[base+i], draftRow(st.Q, i)
		if s.accepts(p, q, x) {
			continue
		}
		if q == nil {
			p[x] = 0 // residual of a one-hot q: p without x
			return i, s.Sample(p), nil
		}
		return i, s.SampleResidual(p, q), nil
	}
	if err := s.Process(st.Logits[st.K], st.Tokens, p); err != nil {
		return 0, 0, fmt.Errorf("sampler: bonus position: %w", err)
	}
	return st.K, s.Sample(p), nil
}

// draftRow is the distribution of drafted token i: nil (one-hot) when q is nil.
func draftRow(q [][]float32, i int) []float32 {
	if q == nil {
		return nil
	}
	return q[i]
}

// accepts decides, with the exact rule, whether to keep drafted token x: with
// probability min(1, p(x)/q(x)), where a nil q is one-hot on x. It draws a random
// number only when p(x) < q(x). (Sampler.Verify and VerifyTree have made sure that
// q(x) > 0; a rule called directly with a row that ends before x reads q(x) as 0.)
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

// checkDraft reports why q cannot be the distribution that drafted token x was drawn
// from; a nil q (one-hot on x) always can. Anything else would silently break
// exactness: a q(x) of 0, for one, would keep x whatever the target thinks of it.
func (s *Sampler) checkDraft(q []float32, x int32) error {
	if q == nil {
		return nil
	}
	if len(q) > s.vocab {
		return fmt.Errorf("draft distribution of %d values for a vocabulary of %d", len(q), s.vocab)
	}
	if int(x) >= len(q) || !(q[x] > 0) {
		return fmt.Errorf("drafted token %d has q = 0 in the distribution it was drawn from (%d values)", x, len(q))
	}
	var sum float64
	for i, v := range q {
		if !(v >= 0) {
			return fmt.Errorf("draft distribution holds %v at token %d", v, i)
		}
		sum += float64(v)
	}
	if math.Abs(sum-1) > 1e-3 {
		return fmt.Errorf("draft distribution sums to %v, not 1", sum)
	}
	return nil
}

// Greedy accepts drafted tokens while each equals the target's argmax, and returns
// the target's argmax at the first difference (or after the last drafted token). It
// ignores q and temperature; the output is identical to plain greedy decoding.
type Greedy struct{}

// Verify implements [Rule].
func (Greedy) Verify(s *Sampler, st Step) (int, int32, error) {
	base := len(st.Tokens) - st.K
	for i := range st.K {
		a, err := s.Argmax(st.Logits[i], st.Tokens[:base+i])
		if err != nil {
			return 0, 0, fmt.Errorf("sampler: draft position %d: %w", i, err)
		}
		if a != st.Tokens[base+i] {
			return i, a, nil
		}
	}
	a, err := s.Argmax(st.Logits[st.K], st.Tokens)
	if err != nil {
		return 0, 0, fmt.Errorf("sampler: bonus position: %w", err)
	}
	return st.K, a, nil
}
