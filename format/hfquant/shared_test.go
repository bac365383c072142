package hfquant

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/format/safetensors"
	"github.com/specula/specula/internal/sharedtest"
)

// probe is one row of the dequantized probes of ../shared/models/README.md: W is
// layer 0's q_proj, D the last layer's down_proj, both [out][in], computed in
// float64 by an independent reader.
type probe struct {
	dir                   string
	down                  string
	w00, w79, sumW, sumW2 float64
	dRow, dCol            int
	d, sumD2              float64
	tol                   float64 // relative
}

// TestSharedProbes checks the dense weights of the shared quantized checkpoints
// against the README's probes to 1e-8 relative (the printed digits): the integer
// formats' float32 values are the exact products. FP8's products are rounded to
// float32 (2⁻²⁴ relative) where the reference keeps float64: 1e-6 there.
func TestSharedProbes(t *testing.T) {
	probes := []probe{
		{"gocoder-m-awq", "model.layers.7.mlp.down_proj", 0.00963592529, -0.0323181152, 9.54387665, 204.872442, 3, 1400, -0.0107116699, 290.567986, 1e-8},
		{"gocoder-m-gptq", "model.layers.7.mlp.down_proj", 0.00963592529, -0.042175293, 8.28206253, 204.987706, 3, 1400, -0.0092086792, 290.401622, 1e-8},
		{"gocoder-m-w4a16", "model.layers.7.mlp.down_proj", 0.0103530884, -0.0341720581, 1.21261215, 204.527473, 3, 1400, -0.0119781494, 289.843778, 1e-8},
		{"gocoder-s-gptq8", "model.layers.3.mlp.down_proj", -0.00375270844, 0.0819253922, -0.595830679, 59.8665971, 3, 700, -0.0180912018, 102.513385, 1e-8},
		{"gocoder-s-fp8", "model.layers.3.mlp.down_proj", -0.00371224523, 0.0822405098, -0.800342325, 59.7677394, 3, 700, -0.0182233534, 102.481629, 1e-6},
	}
	for _, p := range probes {
		t.Run(p.dir, func(t *testing.T) {
			dir := sharedtest.Path(t, "models", p.dir)
			s, err := ReadConfig(dir)
			require.NoError(t, err)
			set, err := safetensors.OpenDir(dir)
			require.NoError(t, err)
			defer set.Close()
			w, err := s.Dense(set, "model.layers.0.self_attn.q_proj")
			require.NoError(t, err)
			d, err := s.Dense(set, p.down)
			require.NoError(t, err)
			near := func(want, got float64, rel float64, what string) {
				assert.InDelta(t, want, got, rel*math.Max(math.Abs(want), 1e-3), what)
			}
			near(p.w00, float64(w.Data[0]), p.tol, "W[0][0]")
			near(p.w79, float64(w.Data[7*w.Cols+9]), p.tol, "W[7][9]")
			sum, sum2 := sums(w.Data)
			near(p.sumW, sum, p.tol, "Σ W")
			near(p.sumW2, sum2, p.tol, "Σ W²")
			near(p.d, float64(d.Data[p.dRow*d.Cols+p.dCol]), p.tol, "D")
			_, dd := sums(d.Data)
			near(p.sumD2, dd, p.tol, "Σ D²")
		})
	}
}

func sums(v []float32) (sum, sum2 float64) {
	for _, x := range v {
		sum += float64(x)
		sum2 += float64(x) * float64(x)
	}
	return sum, sum2
}
