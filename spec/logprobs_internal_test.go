package spec

import (
	"math"
	"testing"
)

// TestLogprobOfFinite: logprobOf lists as alternatives only the tokens a row allows
// (fewer than asked where fewer are), scores a ruled-out token −math.MaxFloat32
// rather than −Inf, and refuses a row it cannot normalise (NaN, +Inf, every logit
// −Inf) rather than reporting NaN.
func TestLogprobOfFinite(t *testing.T) {
	inf := float32(math.Inf(1))
	for _, c := range []struct {
		name    string
		row     []float32
		tok     int32
		top     int
		want    float32 // the token's log-probability
		alts    []int32 // the alternatives, in order
		wantErr bool
	}{
		{name: "free", row: []float32{0, 2, 1, 3}, tok: 1, top: 2, want: float32(2 - logSumExp64(0, 2, 1, 3)), alts: []int32{3, 1}},
		{name: "fewer allowed than asked", row: []float32{-inf, 2, -inf, 1, -inf}, tok: 3, top: 4, want: float32(1 - logSumExp64(2, 1)), alts: []int32{1, 3}},
		{name: "one allowed", row: []float32{-inf, -inf, 5}, tok: 2, top: 3, want: 0, alts: []int32{2}},
		{name: "the token ruled out", row: []float32{-inf, 1, 0}, tok: 0, top: 1, want: -math.MaxFloat32, alts: []int32{1}},
		{name: "NaN", row: []float32{0, float32(math.NaN()), 1}, tok: 0, wantErr: true},
		{name: "+Inf", row: []float32{0, inf, 1}, tok: 0, wantErr: true},
		{name: "all ruled out", row: []float32{-inf, -inf}, tok: 0, top: 1, wantErr: true},
	} {
		var sc scorer
		lp, err := sc.logprobOf(c.row, c.tok, c.top)
		if c.wantErr {
			if err == nil {
				t.Errorf("%s: %+v, want an error", c.name, lp)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if d := math.Abs(float64(lp.Logprob - c.want)); lp.Token != c.tok || d > 1e-6 {
			t.Errorf("%s: token %d at %v, want %d at %v", c.name, lp.Token, lp.Logprob, c.tok, c.want)
		}
		if len(lp.Top) != len(c.alts) {
			t.Fatalf("%s: alternatives %+v, want tokens %v", c.name, lp.Top, c.alts)
		}
		for i, a := range lp.Top {
			if a.Token != c.alts[i] || math.IsInf(float64(a.Logprob), 0) || math.IsNaN(float64(a.Logprob)) || a.Logprob > 0 {
				t.Errorf("%s: alternative %d %+v, want token %d, finite", c.name, i, a, c.alts[i])
			}
		}
	}
}

// logSumExp64 is log Σ e^x.
func logSumExp64(xs ...float64) float64 {
	var s float64
	for _, x := range xs {
		s += math.Exp(x)
	}
	return math.Log(s)
}
