package draft

import "github.com/specula/specula/sampler"

// ConstraintState is a drafting session's side of the request's constraint, for
// sessions that sample their tokens from logits: the state the history ends in (set by
// the decoder before each Propose) and the masking of a draft's logits with the state
// the draft has reached. Embedded, it implements [Constrained]; without a constraint
// it lets everything through.
type ConstraintState struct {
	c  sampler.Constraint
	at int32
}

// NewConstraintState returns the state of a session drafting under c (nil: none).
func NewConstraintState(c sampler.Constraint) ConstraintState {
	return ConstraintState{c: c}
}

// Constrain implements [Constrained].
func (k *ConstraintState) Constrain(state int32) { k.at = state }

// Active reports whether the request has a constraint.
func (k *ConstraintState) Active() bool { return k.c != nil }

// State is the state the history ends in: where a draft starts.
func (k *ConstraintState) State() int32 { return k.at }

// Allows masks logits with state and reports whether the draft may go on there.
func (k *ConstraintState) Allows(state int32, logits []float32) bool {
	return k.c == nil || state >= 0 && k.c.MaskLogits(state, logits)
}

// After is the state after tok in state (state itself without a constraint).
func (k *ConstraintState) After(state, tok int32) int32 {
	if k.c == nil {
		return state
	}
	return k.c.Next(state, tok)
}
