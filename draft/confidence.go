package draft

import (
	"math"

	"github.com/specula/specula/sampler"
)

// Confident is a session that ends its chains where its confidence falls, as
// llama.cpp's --draft-p-min does: a chain ends after its first token whose
// confidence (see [Proposal.Confidence]) is below the threshold. The token that falls
// below is still proposed: it is often accepted and costs only its verification, and
// what becomes of it tells the decoder whether a lower threshold would pay. Whether
// the chain goes on depends only on the drafter's own numbers for the tokens it has
// already drawn, never on which token it draws next, so every drafted token is still
// drawn from the q it reports, and the acceptance rule stays exact.
type Confident interface {
	Session
	// StopBelow sets the threshold for the proposals that follow: p = 0 lets
	// chains run to k, reporting each token's confidence (for a decoder that learns
	// the threshold); p < 0 turns the stop off, and the proposals report no
	// confidence, which then costs nothing (a greedy token's is a softmax over the
	// whole vocabulary).
	StopBelow(p float32)
}

// ConfidentParts appends to dst the sessions of s, s itself included, that end their
// chains by confidence, looking through composites ([SessionParts]), and returns it.
func ConfidentParts(s Session, dst []Confident) []Confident {
	for part := range SessionParts(s) {
		if c, ok := part.(Confident); ok {
			dst = append(dst, c)
		}
	}
	return dst
}

// TokenConfidence is the drafter's probability of its token x, drawn from logits: q[x]
// when x was drawn from the processed distribution q, and when q is nil (x chosen as
// the argmax) the softmax probability of x under the raw logits. It is what
// [Proposal.Confidence] reports. The softmax's exponentials go into scratch, grown
// where it is shorter than logits and returned for the next call, so that a session
// allocates nothing per token once its scratch has the vocabulary's length.
func TokenConfidence(logits []float32, x int32, q, scratch []float32) (float32, []float32) {
	if q != nil {
		return q[x], scratch
	}
	lse, scratch := sampler.LogSumExp(logits, scratch)
	return float32(math.Exp(float64(logits[x]) - lse)), scratch
}
