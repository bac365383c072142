package hfquant

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// refE4M3 decodes a float8_e4m3fn byte from its definition, in float64.
func refE4M3(b byte) float64 {
	e, m := int(b>>3&15), float64(b&7)
	v := math.Ldexp(8+m, e-10)
	if e == 0 {
		v = math.Ldexp(m, -9)
	}
	if b&0x80 != 0 {
		v = -v
	}
	return v
}

func ctScheme(bits, group int, sym bool) *Scheme {
	return &Scheme{Method: CompressedTensors, Groups: []CTGroup{{Name: "group_0", Targets: []string{"Linear"}, Bits: bits, GroupSize: group, Symmetric: sym}}}
}

// TestDenseExact packs known codes in every format and variant, and checks that
// Dense gives the formula's values bit for bit.
func TestDenseExact(t *testing.T) {
	cases := []struct {
		name string
		make func(rng *rand.Rand) layer
	}{
		{"gptq 4-bit v1 asym g32", func(r *rand.Rand) layer {
			return gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, GroupSize: 32, ZeroMinusOne: true}, 16, 96)
		}},
		{"gptq 4-bit v1 act-order g32", func(r *rand.Rand) layer {
			return gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, GroupSize: 32, ZeroMinusOne: true, ActOrder: true}, 24, 128)
		}},
		{"gptq 4-bit v2 one group", func(r *rand.Rand) layer {
			return gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4}, 8, 64)
		}},
		{"gptq 8-bit v2 sym g16", func(r *rand.Rand) layer {
			return gptqLayer(r, &Scheme{Method: GPTQ, Bits: 8, GroupSize: 16, Symmetric: true}, 12, 64)
		}},
		{"gptq 8-bit v1 act-order", func(r *rand.Rand) layer {
			return gptqLayer(r, &Scheme{Method: GPTQ, Bits: 8, GroupSize: 16, ZeroMinusOne: true, ActOrder: true}, 8, 48)
		}},
		{"gptq 2-bit v2 g32", func(r *rand.Rand) layer {
			return gptqLayer(r, &Scheme{Method: GPTQ, Bits: 2, GroupSize: 32}, 32, 64)
		}},
		{"awq gemm g32", func(r *rand.Rand) layer {
			return awqLayer(r, &Scheme{Method: AWQ, Bits: 4, GroupSize: 32}, 24, 96)
		}},
		{"awq gemm one group", func(r *rand.Rand) layer {
			return awqLayer(r, &Scheme{Method: AWQ, Bits: 4}, 16, 40)
		}},
		{"ct 4-bit group sym", func(r *rand.Rand) layer { return ctLayer(r, ctScheme(4, 32, true), 10, 96, false) }},
		{"ct 4-bit group asym, padded", func(r *rand.Rand) layer { return ctLayer(r, ctScheme(4, 12, false), 11, 36, false) }},
		{"ct 4-bit channel asym", func(r *rand.Rand) layer { return ctLayer(r, ctScheme(4, 0, false), 9, 40, false) }},
		{"ct 8-bit channel sym", func(r *rand.Rand) layer { return ctLayer(r, ctScheme(8, 0, true), 7, 20, false) }},
		{"ct 8-bit group asym", func(r *rand.Rand) layer { return ctLayer(r, ctScheme(8, 8, false), 6, 32, false) }},
		{"ct 4-bit group g_idx", func(r *rand.Rand) layer { return ctLayer(r, ctScheme(4, 16, false), 8, 64, true) }},
		{"fp8 block 4×8", func(r *rand.Rand) layer {
			return fp8Layer(r, &Scheme{Method: FP8, Bits: 8, Block: [2]int{4, 8}}, 10, 20)
		}},
		{"fp8 block 128", func(r *rand.Rand) layer {
			return fp8Layer(r, &Scheme{Method: FP8, Bits: 8, Block: [2]int{128, 128}}, 130, 260)
		}},
		{"fp8 per tensor", func(r *rand.Rand) layer { return fp8Layer(r, &Scheme{Method: FP8, Bits: 8}, 5, 7) }},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := c.make(rand.New(rand.NewPCG(uint64(i), 29)))
			require.True(t, l.scheme.Quantized(l.src, pre))
			got, err := l.scheme.Dense(l.src, pre)
			require.NoError(t, err)
			require.Equal(t, l.want.Rows, got.Rows)
			require.Equal(t, l.want.Cols, got.Cols)
			for k := range l.want.Data {
				if math.Float32bits(got.Data[k]) != math.Float32bits(l.want.Data[k]) {
					t.Fatalf("W[%d][%d] = %v, want %v", k/got.Cols, k%got.Cols, got.Data[k], l.want.Data[k])
				}
			}
		})
	}
}
