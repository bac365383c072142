package sampler

import "fmt"

// Step is one verification of a chain draft.
type Step struct {
	// Tokens is the context followed by the K drafted tokens; the distributions of
	// drafted token i are processed with history Tokens[:len(Tokens)-K+i].
	Tokens []int32
	// K is the number of drafted tokens at the end of Tokens; 0 is a plain decoding
	// step.
	K int
	// Q holds the drafter's processed distribution for each drafted token, or is nil
	// when the drafter is deterministic (each q is then one-hot on its token).
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
		x := st.Tokens[base+i]
		px, qx := p[x], float32(1)
		var q []float32
		if st.Q != nil {
			q = st.Q[i]
			qx = 0
			if int(x) < len(q) {
				qx = q[x]
			}
		}
		if px >= qx || s.rng.Float64()*float64(qx) < float64(px) {
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
