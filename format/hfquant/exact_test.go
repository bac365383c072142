package hfquant

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/safetensors"
	"github.com/specula/specula/internal/sharedtest"
)

// TestPackedAs repacks layers into the allowed types only: each repacking's values
// equal Dense's bit for bit, and a layer no allowed type holds is refused with
// ErrNotExact and the reason.
func TestPackedAs(t *testing.T) {
	q40, q80 := []dtype.DType{dtype.Q4_0, dtype.Q8_0}, []dtype.DType{dtype.Q8_0}
	cases := []struct {
		name    string
		make    func(r *rand.Rand) layer
		allowed []dtype.DType
		want    dtype.DType
		err     string
	}{
		{"ct 4-bit sym → Q4_0", func(r *rand.Rand) layer { return ctLayer(r, ctScheme(4, 32, true), 8, 64, false) }, q40, dtype.Q4_0, ""},
		{"ct 4-bit sym, Q8_0 only → Q8_0", func(r *rand.Rand) layer { return ctLayer(r, ctScheme(4, 32, true), 8, 64, false) }, q80, dtype.Q8_0, ""},
		{"awq → Q8_0", func(r *rand.Rand) layer { return awqLayer(r, &Scheme{Method: AWQ, Bits: 4, GroupSize: 32}, 16, 64) }, q40, dtype.Q8_0, ""},
		{"awq, Q4_0 only: refused", func(r *rand.Rand) layer { return awqLayer(r, &Scheme{Method: AWQ, Bits: 4, GroupSize: 32}, 16, 64) },
			[]dtype.DType{dtype.Q4_0}, 0, "codes q − z span [-15, 15], beyond what Q4_0 hold"},
		{"gptq 8-bit sym → Q8_0", func(r *rand.Rand) layer {
			return symmetric(gptqLayer(r, &Scheme{Method: GPTQ, Bits: 8, GroupSize: 32, Symmetric: true}, 8, 64), 8)
		}, q40, dtype.Q8_0, ""},
		{"act-order: refused", func(r *rand.Rand) layer {
			return gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, GroupSize: 32, ZeroMinusOne: true, ActOrder: true}, 16, 128)
		}, q40, 0, "act-order (g_idx): the 32 inputs of a block lie in different groups"},
		{"inexact scale: refused", func(r *rand.Rand) layer { return f32Scales(ctLayer(r, ctScheme(4, 32, true), 4, 64, false), true) },
			q40, 0, "a scale is not a float16 value"},
		{"not whole blocks: refused", func(r *rand.Rand) layer { return ctLayer(r, ctScheme(4, 0, true), 4, 40, false) }, q40, 0, "40 inputs are not whole blocks of 32"},
		{"fp8: refused", func(r *rand.Rand) layer {
			return fp8Layer(r, &Scheme{Method: FP8, Bits: 8, Block: [2]int{4, 32}}, 8, 64)
		},
			q40, 0, "FP8 e4m3 values"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := c.make(rand.New(rand.NewPCG(uint64(i), 31)))
			p, err := l.scheme.PackedAs(l.src, pre, c.allowed...)
			if c.err != "" {
				assert.ErrorIs(t, err, ErrNotExact)
				assert.ErrorContains(t, err, pre+": no exact repacking: "+c.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, p.Type)
			m, err := l.scheme.Dense(l.src, pre)
			require.NoError(t, err)
			got := make([]float32, p.Rows*p.Cols)
			require.NoError(t, dtype.Dequantize(p.Type, p.Data, got))
			for k := range got {
				require.Equal(t, math.Float32bits(m.Data[k]), math.Float32bits(got[k]), "value %d", k)
			}
		})
	}
}

// TestLayerOf names the stored tensors of the shared checkpoints' layers: every
// tensor of a quantized layer belongs to one layer, which one tensor stands for.
func TestLayerOf(t *testing.T) {
	for name, perLayer := range map[string]int{"gocoder-m-awq": 3, "gocoder-m-gptq": 4, "gocoder-m-w4a16": 3, "gocoder-s-fp8": 2} {
		t.Run(name, func(t *testing.T) {
			dir := sharedtest.Path(t, "models", name)
			s, err := ReadConfig(dir)
			require.NoError(t, err)
			set, err := safetensors.OpenDir(dir)
			require.NoError(t, err)
			defer set.Close()
			members := map[string]int{}
			packed := 0
			for _, n := range set.Names() {
				p, main, ok := s.LayerOf(set, n)
				if !ok {
					continue
				}
				members[p]++
				if main {
					packed++
				}
			}
			assert.Equal(t, len(members), packed)
			for p, n := range members {
				assert.Equal(t, perLayer, n, p)
			}
			_, _, ok := s.LayerOf(set, "model.norm.weight")
			assert.False(t, ok)
		})
	}
}
