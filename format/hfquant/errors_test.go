package hfquant

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDenseErrors breaks one tensor of a good layer at a time and checks that Dense
// says which file, tensor and key are at fault.
func TestDenseErrors(t *testing.T) {
	gptq := func(r *rand.Rand) layer {
		return gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, GroupSize: 32, ZeroMinusOne: true, ActOrder: true}, 16, 64)
	}
	awq := func(r *rand.Rand) layer { return awqLayer(r, &Scheme{Method: AWQ, Bits: 4, GroupSize: 32}, 16, 64) }
	ct := func(r *rand.Rand) layer { return ctLayer(r, ctScheme(4, 16, false), 8, 64, true) }
	fp8 := func(r *rand.Rand) layer { return fp8Layer(r, &Scheme{Method: FP8, Bits: 8, Block: [2]int{4, 4}}, 8, 8) }
	cases := []struct {
		name   string
		make   func(*rand.Rand) layer
		break_ func(l *layer)
		tensor string // the suffix the error names
		want   string
	}{
		{"gptq missing qzeros", gptq, func(l *layer) { delete(l.src, pre+".qzeros") }, ".qzeros", "missing"},
		{"gptq missing scales", gptq, func(l *layer) { delete(l.src, pre+".scales") }, ".scales", "missing"},
		{"gptq missing g_idx", gptq, func(l *layer) { delete(l.src, pre+".g_idx") }, ".g_idx", "missing"},
		{"gptq g_idx out of range", gptq, func(l *layer) {
			l.src[pre+".g_idx"] = wordTensor(make([]uint32, 64), 64)
			l.src[pre+".g_idx"].Data[40] = 9
		},
			".g_idx", "input 10 is in group 9, out of range [0, 2)"},
		{"gptq negative g_idx", gptq, func(l *layer) {
			l.src[pre+".g_idx"] = wordTensor(make([]uint32, 64), 64)
			l.src[pre+".g_idx"].Data[3] = 0x80
		},
			".g_idx", "input 0 is in group -2147483648, out of range [0, 2)"},
		{"gptq g_idx short", gptq, func(l *layer) { l.src[pre+".g_idx"] = wordTensor(make([]uint32, 60), 60) }, ".g_idx", "shape [60], want [64]"},
		{"gptq qzeros shape", gptq, func(l *layer) { l.src[pre+".qzeros"] = wordTensor(make([]uint32, 6), 3, 2) }, ".qzeros", "shape [3 2], want [2 2]"},
		{"gptq scales type", gptq, func(l *layer) { l.src[pre+".scales"] = wordTensor(make([]uint32, 32), 2, 16) }, ".scales", "type I32"},
		{"gptq group does not divide", func(r *rand.Rand) layer {
			l := gptq(r)
			l.scheme.GroupSize = 48
			return l
		}, nil, ".qweight", "64 inputs do not divide into groups of group_size 48"},
		{"gptq columns do not divide", gptq, func(l *layer) { l.src[pre+".qweight"] = wordTensor(make([]uint32, 8*15), 8, 15) },
			".qweight", "15 output columns do not divide into words of 8 codes (bits 4)"},
		{"gptq qweight bytes", gptq, func(l *layer) { l.src[pre+".qweight"].Data = l.src[pre+".qweight"].Data[4:] }, ".qweight", "508 bytes for shape [8 16] of I32"},
		{"gptq qweight 3-d", gptq, func(l *layer) { l.src[pre+".qweight"].Shape = []int64{8, 16, 1} }, ".qweight", "shape [8 16 1], want 2 dimensions"},
		{"awq missing qzeros", awq, func(l *layer) { delete(l.src, pre+".qzeros") }, ".qzeros", "missing"},
		{"awq scales shape", awq, func(l *layer) { l.src[pre+".scales"] = halfTensor(make([]float32, 16), 1, 16) }, ".scales", "shape [1 16], want [2 16]"},
		{"ct missing scale", ct, func(l *layer) { delete(l.src, pre+".weight_scale") }, ".weight_scale", "missing"},
		{"ct missing zero point", ct, func(l *layer) { delete(l.src, pre+".weight_zero_point") }, ".weight_zero_point", "missing"},
		{"ct weight_shape", ct, func(l *layer) { l.src[pre+".weight_shape"] = longTensor([]int64{8, 72}, 2) }, ".weight_packed", "shape [8 8], want [8 9]"},
		{"ct weight_shape negative", ct, func(l *layer) { l.src[pre+".weight_shape"] = longTensor([]int64{-8, 64}, 2) }, ".weight_shape", "shape [-8 64] is not a matrix's"},
		{"ct g_idx out of range", ct, func(l *layer) {
			l.src[pre+".weight_g_idx"] = longTensor(make([]int64, 64), 64)
			l.src[pre+".weight_g_idx"].Data[8] = 4
		},
			".weight_g_idx", "input 1 is in group 4"},
		{"ct no group", func(r *rand.Rand) layer {
			l := ct(r)
			l.scheme.Groups[0].Targets = []string{"re:.*q_proj"}
			return l
		}, nil, ".weight_packed", `no config_groups entry targets module "model.layers.0.mlp.up_proj"`},
		{"fp8 missing scale", fp8, func(l *layer) { delete(l.src, pre+".weight_scale_inv") }, ".weight_scale_inv", "missing"},
		{"fp8 scale shape", fp8, func(l *layer) { l.src[pre+".weight_scale_inv"] = f32Tensor(make([]float32, 2), 1, 2) }, ".weight_scale_inv", "shape [1 2], want [2 2]"},
		{"fp8 NaN", fp8, func(l *layer) { l.src[pre+".weight"].Data[9] = 0xff }, ".weight", "NaN at [1][1]"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := c.make(rand.New(rand.NewPCG(uint64(i), 7)))
			if c.break_ != nil {
				c.break_(&l)
			}
			_, err := l.scheme.Dense(l.src, pre)
			require.Error(t, err)
			assert.Contains(t, err.Error(), `test.safetensors: tensor "`+pre+c.tensor+`": `+c.want)
		})
	}
}

// TestGPTQv1StoredMax: a v1 stored zero of 2^bits − 1 reads as 2^bits, unwrapped, as
// vLLM's kernels read it (AutoGPTQ would wrap it to 0).
func TestGPTQv1StoredMax(t *testing.T) {
	ones := func(n int, w uint32) []uint32 {
		out := make([]uint32, n)
		for i := range out {
			out[i] = w
		}
		return out
	}
	s := &Scheme{Method: GPTQ, Bits: 4, ZeroMinusOne: true}
	src := mapSource{
		pre + ".qweight": wordTensor(ones(8, 0x76543210), 1, 8), // input j of every column has code j
		pre + ".qzeros":  wordTensor(ones(1, 0xffffffff), 1, 1),
		pre + ".scales":  halfTensor([]float32{1, 1, 1, 1, 1, 1, 1, 0.5}, 1, 8),
	}
	m, err := s.Dense(src, pre)
	require.NoError(t, err)
	assert.Equal(t, []float32{-16, -15, -14, -13, -12, -11, -10, -9}, m.Data[:8])
	assert.Equal(t, []float32{-8, -7.5, -7, -6.5, -6, -5.5, -5, -4.5}, m.Data[56:])
}
