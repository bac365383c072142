package hfquant

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/safetensors"
	"github.com/specula/specula/internal/sharedtest"
)

// checkPacked packs layer prefix and, when it packs, checks that the blocks'
// values equal Dense's bit for bit. It returns the type (0: not packed).
func checkPacked(t *testing.T, s *Scheme, src Source, prefix string) dtype.DType {
	t.Helper()
	p, ok, err := s.Packed(src, prefix)
	require.NoError(t, err)
	if !ok {
		return 0
	}
	typ, data, rows, cols := p.Type, p.Data, p.Rows, p.Cols
	m, err := s.Dense(src, prefix)
	require.NoError(t, err)
	require.Equal(t, [2]int{m.Rows, m.Cols}, [2]int{rows, cols})
	got := make([]float32, rows*cols)
	require.NoError(t, dtype.Dequantize(typ, data, got))
	for k := range got {
		if math.Float32bits(got[k]) != math.Float32bits(m.Data[k]) {
			t.Fatalf("%s %v: W[%d][%d] = %v, Dense %v", prefix, typ, k/cols, k%cols, got[k], m.Data[k])
		}
	}
	return typ
}

// TestPackedShared packs every quantized layer of the shared checkpoints: GPTQ
// 8-bit symmetric to Q8_0, compressed-tensors 4-bit symmetric to Q4_0, AWQ (zero
// points: q − z in [−15, 15]) to Q4_Z, each bit for bit Dense's values; GPTQ
// act-order (a real g_idx permutation) and FP8 do not pack.
func TestPackedShared(t *testing.T) {
	want := map[string]dtype.DType{
		"gocoder-s-gptq8": dtype.Q8_0, "gocoder-m-w4a16": dtype.Q4_0, "gocoder-m-awq": dtype.Q4_Z,
		"gocoder-m-gptq": 0, "gocoder-s-fp8": 0,
	}
	for name, typ := range want {
		t.Run(name, func(t *testing.T) {
			dir := sharedtest.Path(t, "models", name)
			s, err := ReadConfig(dir)
			require.NoError(t, err)
			set, err := safetensors.OpenDir(dir)
			require.NoError(t, err)
			defer set.Close()
			n := 0
			for _, prefix := range quantizedLayers(s, set) {
				assert.Equal(t, typ, checkPacked(t, s, set, prefix), prefix)
				n++
			}
			assert.Positive(t, n)
			if typ == 0 {
				t.Logf("%d layers: not packed (Dense)", n)
			} else {
				t.Logf("%d layers: %v", n, typ)
			}
		})
	}
}

// quantizedLayers returns the prefixes of a checkpoint's quantized linear layers.
func quantizedLayers(s *Scheme, set *safetensors.Set) []string {
	var out []string
	for _, name := range set.Names() {
		for _, suffix := range []string{".qweight", ".weight_packed", ".weight"} {
			if p, ok := strings.CutSuffix(name, suffix); ok && s.Quantized(set, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// TestPackedRules packs hand-built layers under each rule and each refusal.
func TestPackedRules(t *testing.T) {
	cases := []struct {
		name string
		make func(rng *rand.Rand) layer
		want dtype.DType // 0: refused
	}{
		{"gptq 8-bit sym g64 (z = 128)", func(r *rand.Rand) layer {
			return symmetric(gptqLayer(r, &Scheme{Method: GPTQ, Bits: 8, GroupSize: 64, Symmetric: true}, 8, 128), 8)
		}, dtype.Q8_0},
		{"gptq 4-bit sym per channel (z = 8)", func(r *rand.Rand) layer {
			return symmetric(gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, Symmetric: true}, 8, 96), 4)
		}, dtype.Q4_0},
		{"gptq 4-bit asym g32 (v1 zeros) to Q4_Z", func(r *rand.Rand) layer {
			return gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, GroupSize: 32, ZeroMinusOne: true}, 16, 96)
		}, dtype.Q4_Z},
		{"gptq 4-bit asym g64 (v2 zeros) to Q4_Z", func(r *rand.Rand) layer {
			return gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, GroupSize: 64}, 16, 128)
		}, dtype.Q4_Z},
		{"gptq v1 stored zero 15 (z = 16, q − z = −16): Q8_0", func(r *rand.Rand) layer {
			return storedZeros(gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, GroupSize: 32, ZeroMinusOne: true}, 8, 64), 4, 15)
		}, dtype.Q8_0},
		{"gptq 4-bit zeros 0 (q − z in [0, 15]) to Q4_Z", func(r *rand.Rand) layer {
			return storedZeros(gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, GroupSize: 32}, 8, 64), 4, 0)
		}, dtype.Q4_Z},
		{"ct 4-bit sym g32", func(r *rand.Rand) layer { return ctLayer(r, ctScheme(4, 32, true), 10, 96, false) }, dtype.Q4_0},
		{"ct 8-bit sym channel", func(r *rand.Rand) layer { return ctLayer(r, ctScheme(8, 0, true), 7, 64, false) }, dtype.Q8_0},
		{"awq g32: zero points, Q4_Z not Q4_0", func(r *rand.Rand) layer {
			return awqLayer(r, &Scheme{Method: AWQ, Bits: 4, GroupSize: 32}, 24, 96)
		}, dtype.Q4_Z},
		{"awq per channel to Q4_Z", func(r *rand.Rand) layer {
			return awqLayer(r, &Scheme{Method: AWQ, Bits: 4}, 16, 64)
		}, dtype.Q4_Z},
		{"refused: awq group 16", func(r *rand.Rand) layer {
			return awqLayer(r, &Scheme{Method: AWQ, Bits: 4, GroupSize: 16}, 8, 64)
		}, 0},
		{"refused: act-order", func(r *rand.Rand) layer {
			return gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, GroupSize: 32, ZeroMinusOne: true, ActOrder: true}, 24, 128)
		}, 0},
		{"refused: ct g_idx", func(r *rand.Rand) layer { return ctLayer(r, ctScheme(4, 16, false), 8, 64, true) }, 0},
		{"refused: group 16", func(r *rand.Rand) layer {
			return gptqLayer(r, &Scheme{Method: GPTQ, Bits: 8, GroupSize: 16, Symmetric: true}, 12, 64)
		}, 0},
		{"refused: inputs not a multiple of 32", func(r *rand.Rand) layer { return ctLayer(r, ctScheme(4, 0, true), 9, 40, false) }, 0},
		{"refused: ct 8-bit asym (q − z past int8)", func(r *rand.Rand) layer {
			return wideZeros(ctLayer(r, ctScheme(8, 32, false), 6, 64, false))
		}, 0},
		{"f32 scales exact in f16", func(r *rand.Rand) layer {
			return f32Scales(ctLayer(r, ctScheme(4, 32, true), 4, 64, false), false)
		}, dtype.Q4_0},
		{"refused: f32 scale not exact in f16", func(r *rand.Rand) layer {
			return f32Scales(ctLayer(r, ctScheme(4, 32, true), 4, 64, false), true)
		}, 0},
		{"refused: fp8", func(r *rand.Rand) layer {
			return fp8Layer(r, &Scheme{Method: FP8, Bits: 8, Block: [2]int{4, 32}}, 8, 64)
		}, 0},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := c.make(rand.New(rand.NewPCG(uint64(i), 29)))
			assert.Equal(t, c.want, checkPacked(t, l.scheme, l.src, pre))
		})
	}
}

// symmetric rewrites a GPTQ v2 layer's zeros to 2^(bits−1), as a symmetric quantizer
// stores them.
func symmetric(l layer, bits int) layer { return storedZeros(l, bits, 1<<(bits-1)) }

// storedZeros rewrites every stored zero of a GPTQ layer to v.
func storedZeros(l layer, bits int, v int32) layer {
	qz := l.src[pre+".qzeros"]
	z := make([]int32, qz.Elements()*int64(32/bits))
	for i := range z {
		z[i] = v
	}
	l.src[pre+".qzeros"] = i32Tensor(packAlongCols(z, bits, int(qz.Shape[0]), len(z)/int(qz.Shape[0]), natural), qz.Shape...)
	return l
}

// wideZeros sets an 8-bit compressed-tensors layer's zero points to 0 (signed
// −128), so codes up to 255 − 0 … leave int8.
func wideZeros(l layer) layer {
	zp := l.src[pre+".weight_zero_point"]
	l.src[pre+".weight_zero_point"] = i32Tensor(make([]uint32, zp.Elements()), zp.Shape...)
	return l
}

// f32Scales stores a layer's scales as float32, one of them (when inexact) with a
// bit float16 does not hold.
func f32Scales(l layer, inexact bool) layer {
	sc := l.src[pre+".weight_scale"]
	v := make([]float32, sc.Elements())
	if err := dtype.Dequantize(dtype.F16, sc.Data, v); err != nil {
		panic(err)
	}
	if inexact {
		v[3] = math.Float32frombits(math.Float32bits(v[3]) + 1)
	}
	l.src[pre+".weight_scale"] = f32Tensor(v, sc.Shape...)
	return l
}

// TestQ4ZZero checks the choice of a Q4_Z block's zero at the edges: the smallest z'
// in [0, 15] with every c + z' in [0, 15].
func TestQ4ZZero(t *testing.T) {
	cases := []struct {
		lo, hi int32
		z      uint8
		ok     bool
	}{
		{0, 15, 0, true}, {-15, 0, 15, true}, {-7, 8, 7, true}, {3, 9, 0, true},
		{-16, -1, 0, false}, {0, 16, 0, false}, {-8, 8, 0, false}, {-15, 1, 0, false},
	}
	for _, c := range cases {
		codes := make([]int32, 32)
		codes[5], codes[20] = c.lo, c.hi
		for j := range codes {
			codes[j] = max(c.lo, min(c.hi, codes[j]))
		}
		z, ok := q4zZero(codes)
		assert.Equal(t, c.ok, ok, "codes %d…%d", c.lo, c.hi)
		if c.ok {
			assert.Equal(t, c.z, z, "codes %d…%d", c.lo, c.hi)
		}
	}
}
