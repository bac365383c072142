package kernels

import (
	"math"
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
