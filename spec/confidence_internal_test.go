package spec

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestConfidenceThresholdLearned feeds the controller chains whose acceptance
// follows their confidence in known ways, drafted as the confidence stop drafts them
// under the threshold it is told (probes included), and checks that the threshold it
// learns yields, by simulation, at least 97 % of the tokens per second of the best
// threshold of the grid.
func TestConfidenceThresholdLearned(t *testing.T) {
	cases := []struct {
		name      string
		accept    func(conf float64) float64 // the probability a reached token is accepted
		draftCost float64                    // seconds per drafted token (a target step: 1)
		start     float64                    // the threshold to start from
	}{
		{"a sharp edge at 0.7, cheap drafts", func(c float64) float64 { return b2f(c >= 0.7) }, 0.05, confPrior},
		{"a sharp edge at 0.7, costly drafts", func(c float64) float64 { return b2f(c >= 0.7) }, 0.5, confPrior},
		{"all accepted, free drafts", func(float64) float64 { return 1 }, 0.001, confPrior},
		{"calibrated, from below", func(c float64) float64 { return c }, 0.05, 0.05},
		{"calibrated, from above", func(c float64) float64 { return c }, 0.05, 0.9},
		{"sharpened calibration", func(c float64) float64 { return c * c }, 0.1, confPrior},
	}
	const maxK = 8
	verify := func(m int) float64 { return 1 + 0.1*float64(m-1) }
	// draw drafts a chain under tau and returns its confidences, depth and accepted
	// tokens.
	draw := func(rng *rand.Rand, accept func(float64) float64, tau float32, conf []float32) (depth, acc int) {
		for depth < maxK {
			conf[depth] = float32(rng.Float64())
			depth++
			if conf[depth-1] < tau {
				break
			}
		}
		for acc < depth && rng.Float64() < accept(float64(conf[acc])) {
			acc++
		}
		return depth, acc
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newController(maxK, 1)
			c.pmin = PMinLearned
			c.steps = 2 // past the warm-up step
			for m := 1; m <= maxK+1; m++ {
				c.verify.add(m, verify(m))
			}
			c.drafters[0].conf.tau = tc.start
			rng := rand.New(rand.NewPCG(1, 2))
			conf := make([]float32, maxK)
			cost := func(depth int) float64 { return 0.01 + tc.draftCost*float64(depth) }
			for range 3000 {
				tau := float32(c.threshold(0))
				depth, acc := draw(rng, tc.accept, tau, conf)
				c.observeChain(0, maxK, conf[:depth], depth, acc, cost(depth), float64(tau))
			}
			rate := func(tau float32) float64 {
				var tok, sec float64
				for range 40_000 {
					depth, acc := draw(rng, tc.accept, tau, conf)
					tok += float64(acc + 1)
					sec += cost(depth) + verify(depth+1)
				}
				return tok / sec
			}
			best, bestTau := 0.0, float32(0)
			for l := range confLevels {
				if r := rate(float32(l) / confLevels); r > best {
					best, bestTau = r, float32(l)/confLevels
				}
			}
			got := c.drafters[0].conf.tau
			r := rate(float32(got))
			t.Logf("threshold learned %.2f: %.3f tokens/s; the best, %.2f: %.3f", got, r, bestTau, best)
			assert.GreaterOrEqual(t, r, 0.97*best)
		})
	}
}

// TestConfidenceChainAnswers: a chain stopped by its confidence answers for the
// thresholds that would have cut it there or earlier, and for no lower one; a chain
// that ran to k answers for every threshold.
func TestConfidenceChainAnswers(t *testing.T) {
	cs := newConfStats(4)
	cs.chains[0] = chain{depth: 3, accepted: 1, k: 4, tau: 0.6}
	copy(cs.row(0), []float32{0.9, 0.7, 0.3})
	cs.chains[1] = chain{depth: 4, accepted: 4, k: 4, tau: 0.6}
	copy(cs.row(1), []float32{0.9, 0.8, 0.7, 0.2})
	cases := []struct {
		i    int
		tau  float32
		want bool
	}{{0, 0.6, true}, {0, 0.35, true}, {0, 0.8, true}, {0, 0.3, false}, {0, 0, false}, {1, 0, true}, {1, 0.95, true}}
	for _, c := range cases {
		assert.Equal(t, c.want, cs.answers(c.i, c.tau), "chain %d, threshold %v", c.i, c.tau)
	}
	assert.Equal(t, 3, cut(cs.row(0), 0.6))
	assert.Equal(t, 2, cut(cs.row(0), 0.8))
	assert.Equal(t, 1, cut(cs.row(0), 0.95))
}
