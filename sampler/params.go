package sampler

import (
	"fmt"
	"math"
)

// Params selects how logits become a distribution and how a draft is judged. The zero
// value is greedy decoding with no filters and the exact acceptance rule.
//
// Processing runs in this order: repetition penalty, temperature, top-k, top-p, min-p.
// Every filter keeps the tokens whose probability reaches a threshold, so tokens tied at
// a boundary are all kept, and the result does not depend on token order.
type Params struct {
	// Temperature divides the logits; 0 means greedy decoding (argmax). Must be finite
	// and not negative.
	Temperature float64
	// TopK keeps the K most probable tokens (and any tied with the K-th); 0 keeps all.
	TopK int
	// TopP keeps the smallest set of most probable tokens whose mass reaches TopP, in
	// (0, 1]; 0 means unset, the same as 1 (keep all).
	TopP float64
	// MinP keeps tokens whose probability is at least MinP times the largest, in
	// [0, 1]; 0 keeps all.
	MinP float64
	// RepetitionPenalty (CTRL-style) divides positive logits and multiplies negative
	// ones of tokens already present in the history, once per distinct token. It must be
	// positive; 0 means unset, the same as 1 (no penalty).
	RepetitionPenalty float64
	// RepetitionWindow limits the penalty to the last RepetitionWindow tokens of the
	// history; 0 means the whole history.
	RepetitionWindow int
	// Seed seeds the random number generator, so that runs are reproducible. Every
	// seed, 0 included, is a valid seed.
	Seed uint64
	// Rule is the acceptance rule; nil means [Exact].
	Rule Rule
}

// Greedy reports whether p decodes greedily (temperature 0).
func (p Params) Greedy() bool { return p.Temperature == 0 }

// Validate reports the first parameter that is out of range, by name.
func (p Params) Validate() error {
	switch {
	case p.Temperature < 0 || math.IsNaN(p.Temperature) || math.IsInf(p.Temperature, 0):
		return fmt.Errorf("sampler: Temperature %v must be a finite number >= 0", p.Temperature)
	case p.TopK < 0:
		return fmt.Errorf("sampler: TopK %d must be >= 0", p.TopK)
	case p.TopP < 0 || p.TopP > 1 || math.IsNaN(p.TopP):
		return fmt.Errorf("sampler: TopP %v must lie in (0, 1] (or be 0 for unset)", p.TopP)
	case p.MinP < 0 || p.MinP > 1 || math.IsNaN(p.MinP):
		return fmt.Errorf("sampler: MinP %v must lie in [0, 1]", p.MinP)
	case p.RepetitionPenalty < 0 || math.IsNaN(p.RepetitionPenalty) || float32(p.RepetitionPenalty) > math.MaxFloat32 ||
		(p.RepetitionPenalty > 0 && float32(p.RepetitionPenalty) == 0):
		return fmt.Errorf("sampler: RepetitionPenalty %v must be a finite float32 > 0 (or 0 for unset)", p.RepetitionPenalty)
	case p.RepetitionWindow < 0:
		return fmt.Errorf("sampler: RepetitionWindow %d must be >= 0", p.RepetitionWindow)
	}
	return nil
}

func (p Params) topP() float64 {
	if p.TopP == 0 {
		return 1
	}
	return p.TopP
}

func (p Params) penalty() float32 {
	if p.RepetitionPenalty == 0 {
		return 1
	}
	return float32(p.RepetitionPenalty)
}
