package vecmath

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestMaxScale: Max and Scale (assembly where the CPU has AVX2) against Go loops, at
// lengths that leave tails, with infinities, signed zeros and NaN anywhere.
func TestMaxScale(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 12))
	inf := float32(math.Inf(1))
	for _, n := range []int{0, 1, 7, 8, 9, 16, 33, 500} {
		for _, special := range []float32{0, inf, -inf, float32(math.Copysign(0, -1)), float32(math.NaN())} {
			for _, at := range []int{-1, 0, n / 2, n - 1} {
				v := randVec(rng, n)
				if at >= 0 && at < n {
					v[at] = special
				}
				want := float32(math.Inf(-1))
				for _, x := range v {
					want = max(want, x)
				}
				got := Max(v)
				if got != want && !(math.IsNaN(float64(got)) && math.IsNaN(float64(want))) {
					t.Fatalf("Max n=%d special %v at %d: %v, want %v", n, special, at, got, want)
				}
				s := float32(rng.Float64()*3 - 1)
				scaled := append([]float32(nil), v...)
				Scale(scaled, s)
				for i, x := range v {
					if w := x * s; math.Float32bits(scaled[i]) != math.Float32bits(w) {
						t.Fatalf("Scale n=%d index %d: %v, want %v", n, i, scaled[i], w)
					}
				}
			}
		}
	}
}

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}
