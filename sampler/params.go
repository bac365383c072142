package sampler

import (
	"errors"
	"fmt"
	"math"
)

// Params selects how logits become a distribution and how a draft is judged. The zero
// value is greedy decoding with no filters and the exact acceptance rule.
//
// Processing runs in this order: repetition penalty, temperature, top-k, top-p, min-p
// (after a [Constraint]'s mask, which the caller applies to the logits first).
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
	// seed, 0 included, is a valid seed. [Params.Split] derives the seeds of the
	// random streams that a request hands to its drafters.
	Seed uint64
	// Rule is the acceptance rule; nil means [Exact].
	Rule Rule

	// stream names the random stream among those derived from one request's seed:
	// 0 for the request's own (its acceptance draws), the path of Split calls for the
	// others. Seed already holds it mixed in; New also feeds it to the generator, so
	// that a derived stream stays apart from the request's even if Seed is reset.
	stream uint64
}

// Split returns p with a random stream of its own, the i-th (i ≥ 0) derived from p's:
// the same processing, a different Seed, and draws unrelated to those of a sampler
// made from p or from any other split of it. The decoder hands each drafting session
// of a request its split of the request's parameters, so that a drafter sampling with
// sampler.New(req.Sampling, …) can never reuse the acceptance rule's random numbers
// (which would bias the output), and a drafter that starts other drafters hands each
// of them a split of its own.
//
// The first-level splits of a request's parameters are distinct from the request's
// stream and from each other by construction; deeper ones with probability 1 − 2⁻⁶⁴.
func (p Params) Split(i int) Params {
	s := mix64(p.stream + 0x9e3779b97f4a7c15*(uint64(i)+1))
	p.Seed ^= p.stream ^ s
	p.stream = s
	return p
}

// Choice returns the parameters of the i-th (i ≥ 0) of several samples of one request
// (OpenAI's n): choice 0 is p itself, so that one sample is the request alone; each
// other has a Seed of its own, so that the samples draw independently of each other
// and of their drafters' streams.
func (p Params) Choice(i int) Params {
	if i > 0 {
		p.Seed ^= mix64(0x6a09e667f3bcc909 * uint64(i))
	}
	return p
}

// mix64 is SplitMix64's finaliser: a bijection of uint64 that maps 0 to 0 and spreads
// nearby inputs over the whole range.
func mix64(x uint64) uint64 {
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// Greedy reports whether p decodes greedily (temperature 0).
func (p Params) Greedy() bool { return p.Temperature == 0 }

// ErrInvalidParams is matched (with errors.Is) by the error of [Params.Validate] (and
// so of [New]): a parameter out of its range, a [*FieldError] that names it.
var ErrInvalidParams = errors.New("sampler: invalid parameter")

// FieldError is a parameter out of its range: which field, and what is wrong with its
// value. It matches [ErrInvalidParams]. Callers that hold the parameters under other
// names (a service's request) map Field with errors.As, never by reading the message.
type FieldError struct {
	// Field is the parameter's name as the Go field is written ("Temperature").
	Field string
	// Err says what is wrong with the value.
	Err error
}

func (e *FieldError) Error() string { return "sampler: " + e.Field + ": " + e.Err.Error() }

// Unwrap returns ErrInvalidParams and the cause.
func (e *FieldError) Unwrap() []error { return []error{ErrInvalidParams, e.Err} }

// invalid returns the FieldError of field, with a formatted message.
func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

// Validate reports the first parameter that is out of range as a [*FieldError]
// naming it (which matches [ErrInvalidParams]). These are the parameters' only
// bounds: the layers above check them through Validate, never again themselves.
func (p Params) Validate() error {
	switch {
	case p.Temperature < 0 || math.IsNaN(p.Temperature) || math.IsInf(p.Temperature, 0):
		return invalid("Temperature", "%v must be a finite number >= 0", p.Temperature)
	case p.TopK < 0:
		return invalid("TopK", "%d must be >= 0", p.TopK)
	case p.TopP < 0 || p.TopP > 1 || math.IsNaN(p.TopP):
		return invalid("TopP", "%v must lie in (0, 1] (or be 0 for unset)", p.TopP)
	case p.MinP < 0 || p.MinP > 1 || math.IsNaN(p.MinP):
		return invalid("MinP", "%v must lie in [0, 1]", p.MinP)
	case p.RepetitionPenalty < 0 || math.IsNaN(p.RepetitionPenalty) || float32(p.RepetitionPenalty) > math.MaxFloat32 ||
		(p.RepetitionPenalty > 0 && float32(p.RepetitionPenalty) == 0):
		return invalid("RepetitionPenalty", "%v must be a finite float32 > 0 (or 0 for unset)", p.RepetitionPenalty)
	case p.RepetitionWindow < 0:
		return invalid("RepetitionWindow", "%d must be >= 0", p.RepetitionWindow)
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
