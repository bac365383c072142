package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestWeightedSum: one fused multiply-add per term, value row by value row, bit for
// bit, on whatever kernels the machine runs.
func TestWeightedSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, hd := range []int{16, 64, 128, 24} {
		for _, heads := range []int{1, 2, 3, 4, 5, 8} {
			for _, cnt := range []int{0, 1, 7, 16} {
				ldw := cnt + 2
				w := randVec(rng, heads*ldw)
				v := randVec(rng, cnt*hd+5)
				out := randVec(rng, heads*hd)
				want := append([]float32(nil), out...)
				for h := range heads {
					for j := range cnt {
						for d := range hd {
							want[h*hd+d] = fma32(w[h*ldw+j], v[j*hd+d], want[h*hd+d])
						}
					}
				}
				WeightedSum(w, ldw, v, cnt, out, heads)
				if !slices.Equal(out, want) {
					t.Fatalf("hd %d heads %d cnt %d: differs from one fused multiply-add per term, in order", hd, heads, cnt)
				}
			}
		}
	}
}

// TestSiLUMul checks SiLUMul (the assembly where the CPU has AVX2) against its
// definition in float64 and, value for value, against goSiLUMul: the kernel repeats the
// twin's float32 operations one by one, so the two agree to the bit. Inputs cover the
// whole range of gate values, both signs of zero, the cut-off of ExpNeg, infinities and
// NaN, at lengths that leave tails.
func TestSiLUMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 10))
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 87.33654, -87.33654, 87.3366, -87.3366, 88, -88, 100, -100,
		1e-30, -1e-30, 1e30, -1e30, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 0.5, -0.5, 20, -20}
	for _, n := range []int{0, 1, 7, 8, 9, 16, 31, 64, 1000, 4099} {
		gate := make([]float32, n)
		up := make([]float32, n)
		for i := range gate {
			switch i % 4 {
			case 0:
				gate[i] = float32(rng.NormFloat64() * 4)
			case 1:
				gate[i] = float32(rng.Float64()*200 - 100)
			case 2:
				gate[i] = special[rng.IntN(len(special))]
			default:
				gate[i] = float32(rng.NormFloat64() * 0.01)
			}
			up[i] = float32(rng.NormFloat64())
		}
		got := make([]float32, n)
		SiLUMul(got, gate, up)
		twin := make([]float32, n)
		goSiLUMul(twin, gate, up)
		for i := range n {
			if math.Float32bits(got[i]) != math.Float32bits(twin[i]) && !(isNaN32(got[i]) && isNaN32(twin[i])) {
				t.Fatalf("n=%d gate %v up %v: SiLUMul %v (%#x), goSiLUMul %v (%#x)", n, gate[i], up[i],
					got[i], math.Float32bits(got[i]), twin[i], math.Float32bits(twin[i]))
			}
			g, u := float64(gate[i]), float64(up[i])
			want := g / (1 + math.Exp(-g)) * u
			if math.IsNaN(g) || math.IsInf(g, 0) {
				continue
			}
			if d := math.Abs(float64(got[i]) - want); d > 1e-6*math.Abs(want)+1e-30 {
				t.Fatalf("gate %v up %v: %v, want %v", gate[i], up[i], got[i], want)
			}
		}
		// In place, as the runtime calls it.
		in := slices.Clone(gate)
		SiLUMul(in, in, up)
		for i := range n {
			if math.Float32bits(in[i]) != math.Float32bits(got[i]) && !(isNaN32(in[i]) && isNaN32(got[i])) {
				t.Fatalf("n=%d in place differs at %d", n, i)
			}
		}
	}
}

// TestGELUMul checks GELUMul against GELU's tanh form in float64, 0.5·x·(1 +
// tanh(√(2/π)·(x + 0.044715·x³)))·up — written x / (1 + e^(−2·√(2/π)·(…)))·up, the
// same function without the cancellation of 1 + tanh for negative x — over the range
// of gate values a model gives, and in place. (It has no assembly: the model
// families that use it run it in Go.)
func TestGELUMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	gate := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 0.5, -0.5, 3, -3, 6, -6, 10, -10, 30, -30, 1e-20, -1e-20}
	for range 2000 {
		gate = append(gate, float32(rng.NormFloat64()*3))
	}
	up := randVec(rng, len(gate))
	got := make([]float32, len(gate))
	GELUMul(got, gate, up)
	for i, g := range gate {
		x, u := float64(g), float64(up[i])
		want := x / (1 + math.Exp(-2*math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x))) * u
		if th := 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x))) * u; math.Abs(x) < 3 && math.Abs(th-want) > 1e-12 {
			t.Fatalf("the two forms differ at %v: %v, %v", x, th, want)
		}
		if d := math.Abs(float64(got[i]) - want); d > 1e-5*math.Abs(want)+1e-30 {
			t.Fatalf("gate %v up %v: %v, want %v", g, up[i], got[i], want)
		}
	}
	in := slices.Clone(gate)
	GELUMul(in, in, up)
	for i := range in {
		if math.Float32bits(in[i]) != math.Float32bits(got[i]) {
			t.Fatalf("in place differs at %d: %v, %v", i, in[i], got[i])
		}
	}
}

func isNaN32(x float32) bool { return x != x }

func BenchmarkSiLUMul(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	gate, up := randVec(rng, 4096), randVec(rng, 4096)
	dst := make([]float32, 4096)
	for _, c := range []struct {
		name string
		f    func(dst, gate, up []float32)
	}{{"kernel", SiLUMul}, {"go", goSiLUMul}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(4096 * 4)
			for range b.N {
				c.f(dst, gate, up)
			}
		})
	}
}

// TestStreamRead: the bandwidth probe reads every byte, odd lengths included.
func TestStreamRead(t *testing.T) {
	for _, n := range []int{0, 7, 256, 1000, 1 << 16} {
		b := make([]byte, n)
		var want uint64
		for i := 0; i+8 <= n; i += 8 {
			b[i] = byte(i / 8)
			want += uint64(i / 8 % 256)
		}
		for i := n &^ 7; i < n; i++ {
			b[i] = 1
			want++
		}
		if got := StreamRead(b); got != want {
			t.Fatalf("StreamRead of %d bytes = %d, want %d", n, got, want)
		}
	}
}
