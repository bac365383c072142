package heads

import "github.com/specula/specula/draft"

// chainStop is a head session's confidence stop ([draft.Confident]), for its
// chains: each drafted token's confidence ([draft.TokenConfidence]), which the
// proposal reports, and the threshold below which the chain ends after the token.
// Embedded, it gives the session StopBelow. Trees are drafted whole.
type chainStop struct {
	minConf   float32
	chainConf []float32 // the proposal's Confidence
	lse       []float32 // softmax scratch
}

func newChainStop(maxK, vocab int) chainStop {
	return chainStop{chainConf: make([]float32, 0, max(maxK, 1)), lse: make([]float32, 0, vocab)}
}

// StopBelow implements [draft.Confident].
func (c *chainStop) StopBelow(p float32) { c.minConf = p }

// confidence is the proposal's Confidence: nil with the stop off.
func (c *chainStop) confidence() []float32 {
	if c.minConf < 0 {
		return nil
	}
	return c.chainConf
}

// ends records the confidence of x, drafted from logits (drawn from q, or the argmax
// when q is nil), and reports whether the chain ends after it; with the stop off it
// records nothing.
func (c *chainStop) ends(logits []float32, x int32, q []float32) bool {
	if c.minConf < 0 {
		return false
	}
	var v float32
	v, c.lse = draft.TokenConfidence(logits, x, q, c.lse)
	c.chainConf = append(c.chainConf, v)
	return v < c.minConf
}
