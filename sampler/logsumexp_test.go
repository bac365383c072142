package sampler_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/sampler"
)

// TestLogSumExp: LogSumExp against log Σ e^x in float64, at lengths that leave the
// vectorised arithmetic tails, with masked (−Inf) logits, large logits whose plain
// exponentials overflow, and the edge cases it passes through (no logits, every one
// masked, a NaN); the logits stay as they were, and the scratch grows once, then is
// reused without allocating.
func TestLogSumExp(t *testing.T) {
	inf := float32(math.Inf(1))
	rng := rand.New(rand.NewPCG(38, 38))
	random := func(n int, scale float64, masked int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * scale)
			if masked > 0 && i%masked == 0 {
				v[i] = -inf
			}
		}
		return v
	}
	tests := []struct {
		name string
		xs   []float32
		want float64 // NaN: the reference of log Σ e^x in float64
	}{
		{"one", []float32{3}, 3},
		{"two equal", []float32{-1, -1}, -1 + math.Ln2},
		{"seven", random(7, 4, 0), math.NaN()},
		{"eight", random(8, 4, 0), math.NaN()},
		{"nine", random(9, 4, 0), math.NaN()},
		{"vocabulary", random(32003, 6, 0), math.NaN()},
		{"masked", random(1001, 6, 3), math.NaN()},
		{"large", append(random(40, 1, 0), 1000, 999), math.NaN()},
		{"empty", nil, math.Inf(-1)},
		{"all masked", []float32{-inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf}, math.Inf(-1)},
		{"NaN", append(random(20, 1, 0), float32(math.NaN())), math.NaN()},
	}
	var scratch []float32
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.want
			if math.IsNaN(want) && !slices.ContainsFunc(tc.xs, func(x float32) bool { return x != x }) {
				mx := math.Inf(-1)
				for _, x := range tc.xs {
					mx = max(mx, float64(x))
				}
				var s float64
				for _, x := range tc.xs {
					s += math.Exp(float64(x) - mx)
				}
				want = mx + math.Log(s)
			}
			xs := slices.Clone(tc.xs)
			var got float64
			got, scratch = sampler.LogSumExp(xs, scratch)
			sameBits := func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }
			assert.True(t, slices.EqualFunc(tc.xs, xs, sameBits), "the logits are left as they were")
			if math.IsNaN(want) || math.IsInf(want, 0) {
				assert.Equal(t, math.IsNaN(want), math.IsNaN(got), "got %v, want %v", got, want)
				assert.Equal(t, math.IsInf(want, -1), math.IsInf(got, -1), "got %v, want %v", got, want)
				return
			}
			assert.InDelta(t, want, got, 1e-6*max(1, math.Abs(want)))
		})
	}
	require.GreaterOrEqual(t, cap(scratch), 32003)
	row := tests[5].xs
	allocs := testing.AllocsPerRun(10, func() { _, scratch = sampler.LogSumExp(row, scratch) })
	assert.Zero(t, allocs, "a row no longer than the scratch allocates nothing")
}
