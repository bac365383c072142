package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestDotAxpy(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for n := range 70 {
		a, b := randVec(rng, n), randVec(rng, n+3)
		var want float64
		for i := range n {
			want += float64(a[i]) * float64(b[i])
		}
		if got := Dot(a, b); math.Abs(float64(got)-want) > 1e-4*(1+math.Abs(want)) {
			t.Fatalf("Dot n=%d: %v, want %v", n, got, want)
		}
		if got := goDot(a, b[:n]); math.Abs(float64(got)-want) > 1e-4*(1+math.Abs(want)) {
			t.Fatalf("goDot n=%d: %v, want %v", n, got, want)
		}
		y := append([]float32(nil), b...)
		Axpy(0.5, a, y)
		for i := range b {
			w := b[i]
			if i < n {
				w += 0.5 * a[i]
			}
			if math.Abs(float64(y[i]-w)) > 1e-6 {
				t.Fatalf("Axpy n=%d index %d: %v, want %v", n, i, y[i], w)
			}
		}
	}
}
