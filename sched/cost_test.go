package sched

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestCostCurve: passes of varied sizes that take fixed + perToken·tokens, with noise,
// give back the line; passes of one size give the prior's split of their mean; and the
// marginal cost of a sequence's tokens is the whole pass alone, its tokens' share when
// others fill the pass.
func TestCostCurve(t *testing.T) {
	const fixed, perToken = 400 * time.Microsecond, 80 * time.Microsecond
	rng := rand.New(rand.NewPCG(1, 2))
	var c costCurve
	assert.Equal(t, Load{}, c.load(), "nothing learned")
	for range 500 {
		forwards := 1 + rng.IntN(8)
		tokens := forwards * (1 + rng.IntN(5))
		d := fixed + time.Duration(tokens)*perToken
		d = time.Duration(float64(d) * (0.9 + 0.2*rng.Float64()))
		c.add(forwards, tokens, d)
	}
	l := c.load()
	assert.InDelta(t, fixed.Seconds(), l.Fixed.Seconds(), 0.15*fixed.Seconds(), "fixed %v", l.Fixed)
	assert.InDelta(t, perToken.Seconds(), l.PerToken.Seconds(), 0.1*perToken.Seconds(), "per token %v", l.PerToken)
	assert.InDelta(t, 4.5, l.Forwards, 1.5)
	assert.Equal(t, l.Cost(3), l.Fixed+3*l.PerToken)

	alone := Load{Forwards: 1, Tokens: 4, Fixed: fixed, PerToken: perToken}
	assert.Equal(t, alone.Cost(4), alone.Marginal(4), "alone, a step pays the whole pass")
	full := Load{Forwards: 8, Tokens: 32, Fixed: fixed, PerToken: perToken}
	assert.Equal(t, 4*perToken, full.Marginal(4), "shared, a step pays its tokens")

	var one costCurve
	for range 50 {
		one.add(1, 1, time.Millisecond)
	}
	l = one.load()
	assert.InDelta(t, time.Millisecond.Seconds(), l.Cost(1).Seconds(), 1e-6, "through the mean")
	assert.InDelta(t, priorShare*time.Millisecond.Seconds(), l.PerToken.Seconds(), 1e-6, "the prior's share")
}
