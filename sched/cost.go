package sched

import (
	"math"
	"time"
)

// Load describes a scheduled model's recent passes: how many forwards and tokens they
// carried, and what a pass costs as a function of the tokens in it, learned from the
// passes' timings on this machine and model. A speculative decoder reads it to price
// its drafts by what they cost the whole batch: when many sequences share a pass, a
// draft token adds only its own compute to a pass that runs anyway, but every other
// sequence waits for it.
type Load struct {
	// Forwards and Tokens are the mean forwards and tokens per pass, the recent
	// passes weighing most; 1 forward is a sequence alone. Like the cost, they are
	// learned from the passes of streaming forwards: a pass that carries a prefill's
	// tokens is left out.
	Forwards, Tokens float64
	// Fixed and PerToken are the learned cost of a pass: Fixed + PerToken·tokens.
	Fixed, PerToken time.Duration
}

// Cost is the estimated time of a pass of n tokens (0 for none).
func (l Load) Cost(n float64) time.Duration {
	if n <= 0 {
		return 0
	}
	return l.Fixed + time.Duration(n*float64(l.PerToken))
}

// Marginal is what n tokens add to a pass that carries the other sequences' tokens:
// the whole pass for a sequence alone, its tokens' share of the work when the pass
// runs for the others anyway.
func (l Load) Marginal(n float64) time.Duration {
	others := l.Tokens * (l.Forwards - 1) / max(l.Forwards, 1)
	return l.Cost(others+n) - l.Cost(others)
}

// costCurve learns a pass's time as a line in its tokens: a least-squares fit over the
// passes, older ones fading.
type costCurve struct {
	w, x, y, xx, xy float64 // decayed sums of 1, tokens, seconds, tokens², tokens·seconds
	forwards        float64 // decayed sum of forwards
}

const (
	curveFade  = 0.98 // weight a pass keeps at each later one
	priorShare = 0.25 // a token's share of a one-token pass, before the tokens vary
)

// add learns a pass of the given forwards and tokens that took d.
func (c *costCurve) add(forwards, tokens int, d time.Duration) {
	x, y := float64(tokens), d.Seconds()
	c.w = c.w*curveFade + 1
	c.x = c.x*curveFade + x
	c.y = c.y*curveFade + y
	c.xx = c.xx*curveFade + x*x
	c.xy = c.xy*curveFade + x*y
	c.forwards = c.forwards*curveFade + float64(forwards)
}

// load returns what the curve knows; the zero Load before any pass.
func (c *costCurve) load() Load {
	if c.w == 0 {
		return Load{}
	}
	mx, my := c.x/c.w, c.y/c.w
	vx := c.xx/c.w - mx*mx
	var slope float64
	if vx > 1 {
		slope = (c.xy/c.w - mx*my) / vx
	}
	if vx <= 1 || slope <= 0 {
		// The passes had (nearly) one size, or the fit is noise: give a token the
		// prior share of a one-token pass, through the observed mean.
		slope = my * priorShare / (1 + priorShare*(max(mx, 1)-1))
	}
	fixed := max(my-slope*mx, 0)
	if fixed == 0 { // the line would pass below the origin: keep the mean
		slope = my / math.Max(mx, 1)
	}
	return Load{
		Forwards: c.forwards / c.w, Tokens: mx,
		Fixed: seconds(fixed), PerToken: seconds(slope),
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Sharing is the mean forwards per recent pass (Forwards): 1 for a sequence alone, 0
// before any pass. With Marginal it is what an adaptive decoder reads of the passes.
func (l Load) Sharing() float64 { return l.Forwards }
