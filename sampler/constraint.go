package sampler

// Constraint restricts generation to a language — a grammar, a regular expression, a
// JSON Schema (package grammar's Matcher is one) — by states that advance token by
// token. The decoder masks the target's logits at every position of a draft with the
// state the draft reaches there (a draft model masks its drafts the same way, which
// only makes drafts better); the acceptance rule then keeps the target's constrained
// distribution exactly: the target's own, restricted to the tokens the language allows
// and renormalised.
//
// The order is always the same: the mask first (MaskLogits on the raw logits), then
// the [Params] processing — repetition penalty, temperature, top-k, top-p, min-p — on
// the tokens the mask left, so a filter's threshold is taken among allowed tokens only.
//
// A Constraint is safe for concurrent use (one serves many requests); its states
// are plain values.
type Constraint interface {
	// Start is the state before the first generated token.
	Start() int32
	// Next is the state after token in state, or a negative value when the language
	// does not allow token there. End-of-sequence tokens are allowed exactly where the
	// text so far is a sentence of the language.
	Next(state, token int32) int32
	// MaskLogits sets to −∞ the logits of the tokens not allowed in state (a row as
	// long as the vocabulary, or shorter for a smaller draft vocabulary) and reports
	// whether any token is allowed.
	MaskLogits(state int32, logits []float32) bool
}
