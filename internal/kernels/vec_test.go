package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
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

func TestDotPacked(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	for _, cols := range []int{8, 64, 128} {
		for n := 1; n <= Group; n++ {
			x := randVec(rng, n*cols)
			packed := make([]float32, n*cols)
			PackRows(packed, x, n, cols)
			w := randVec(rng, cols)
			out := make([]float32, 3*n)
			DotPacked(w, packed, n, out, 3)
			for t2 := range n {
				want := goDot(w, x[t2*cols:(t2+1)*cols])
				if math.Abs(float64(out[3*t2]-want)) > 1e-4*(1+math.Abs(float64(want))) {
					t.Fatalf("cols %d n %d row %d: %v, want %v", cols, n, t2, out[3*t2], want)
				}
			}
		}
	}
}

// TestWeightedSum: the same sums as the Axpy calls it replaces, bit for bit.
func TestWeightedSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, hd := range []int{16, 64, 128, 24} {
		for _, heads := range []int{1, 3, 4} {
			for _, cnt := range []int{0, 1, 7, 16} {
				ldw := cnt + 2
				w := randVec(rng, heads*ldw)
				v := randVec(rng, cnt*hd+5)
				out := randVec(rng, heads*hd)
				want := append([]float32(nil), out...)
				for h := range heads {
					for j := range cnt {
						Axpy(w[h*ldw+j], v[j*hd:(j+1)*hd], want[h*hd:(h+1)*hd])
					}
				}
				WeightedSum(w, ldw, v, cnt, out, heads)
				if !slices.Equal(out, want) {
					t.Fatalf("hd %d heads %d cnt %d: differs from the Axpy calls", hd, heads, cnt)
				}
			}
		}
	}
}
