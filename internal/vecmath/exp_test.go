package vecmath

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestExpNegAccuracy(t *testing.T) {
	worst := 0.0
	for x := float32(-90); x <= 0; x += 0.000731 {
		got, want := float64(ExpNeg(x)), math.Exp(float64(x))
		if want < 1.2e-38 {
			if got != 0 && math.Abs(got-want) > 1e-38 {
				t.Fatalf("ExpNeg(%v) = %v, want about %v", x, got, want)
			}
			continue
		}
		worst = max(worst, math.Abs(got-want)/want)
	}
	if worst > 3e-7 {
		t.Errorf("worst relative error %.3g, want <= 3e-7", worst)
	}
	for _, x := range []float32{0, float32(math.Inf(-1)), float32(math.NaN()), -1e30} {
		want := float32(0)
		if x == 0 {
			want = 1
		}
		if got := ExpNeg(x); got != want {
			t.Errorf("ExpNeg(%v) = %v, want %v", x, got, want)
		}
	}
}

func TestExpShiftedMatchesExpNeg(t *testing.T) {
	v := []float32{3, 2.5, -1, float32(math.Inf(-1)), -200, 3}
	want := make([]float32, len(v))
	var sum float64
	for i, x := range v {
		want[i] = ExpNeg((x - 3) * 0.5)
		sum += float64(want[i])
	}
	if got := ExpShifted(v, 3, 0.5); got != sum {
		t.Errorf("sum %v, want %v", got, sum)
	}
	for i := range v {
		if v[i] != want[i] {
			t.Errorf("v[%d] = %v, want %v", i, v[i], want[i])
		}
	}
}

// TestExpShiftedKernel checks ExpShifted (the assembly where the CPU has AVX2) value
// for value and sum for sum against goExpShifted and ExpNeg, over softmax-like rows
// with tails, far-below-cut-off values, −Inf, NaN and several temperatures.
func TestExpShiftedKernel(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	for _, n := range []int{1, 7, 8, 9, 33, 128, 1000, 8195} {
		for _, invT := range []float32{1, 0.5, 1.25, 1e30} {
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(rng.NormFloat64() * 8)
				switch rng.IntN(40) {
				case 0:
					v[i] = float32(math.Inf(-1))
				case 1:
					v[i] = float32(math.NaN())
				case 2:
					v[i] = -1e4
				}
			}
			mx := float32(math.Inf(-1))
			for _, x := range v {
				if x > mx {
					mx = x
				}
			}
			twin := slices.Clone(v)
			got := slices.Clone(v)
			wantSum := goExpShifted(twin, mx, invT)
			if sum := ExpShifted(got, mx, invT); sum != wantSum {
				t.Fatalf("n=%d invT=%v: sum %v, twin %v", n, invT, sum, wantSum)
			}
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(twin[i]) {
					t.Fatalf("n=%d invT=%v x=%v: %v, twin %v", n, invT, v[i], got[i], twin[i])
				}
				if x := (v[i] - mx) * invT; x == x && got[i] != ExpNeg(x) {
					t.Fatalf("x=%v: %v, ExpNeg %v", x, got[i], ExpNeg(x))
				}
			}
		}
	}
}
