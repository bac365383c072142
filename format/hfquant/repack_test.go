package hfquant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/safetensors"
	"github.com/specula/specula/internal/sharedtest"
)

// checkPacked packs layer prefix and, when it packs, checks it against Dense
// (checkPacking) and that a Perm sorts the inputs by group, stably. It returns the
// type (0: not packed) and whether the packing has a Perm.
func checkPacked(t *testing.T, s *Scheme, src Source, prefix string) (dtype.DType, bool) {
	t.Helper()
	p, ok, err := s.Packed(src, prefix)
	require.NoError(t, err)
	if !ok {
		return 0, false
	}
	m, err := s.Dense(src, prefix)
	require.NoError(t, err)
	checkPacking(t, p, m)
	if p.Perm != nil {
		checkGroupOrder(t, s, src, prefix, p.Perm)
	}
	return p.Type, p.Perm != nil
}

// checkPacking checks that a packing's values, their columns put back in input order
// by its Perm (a permutation of the columns), equal the dense matrix's bit for bit.
func checkPacking(t *testing.T, p Packing, m Matrix) {
	t.Helper()
	rows, cols := p.Rows, p.Cols
	require.Equal(t, [2]int{m.Rows, m.Cols}, [2]int{rows, cols})
	got := make([]float32, rows*cols)
	require.NoError(t, dtype.Dequantize(p.Type, p.Data, got))
	perm := p.Perm
	if perm != nil {
		require.Len(t, perm, cols)
		seen := make([]bool, cols)
		for _, i := range perm {
			require.True(t, i >= 0 && int(i) < cols && !seen[i], "Perm is not a permutation: input %d", i)
			seen[i] = true
		}
	}
	for k := range got {
		o, j := k/cols, k%cols
		i := j
		if perm != nil {
			i = int(perm[j])
		}
		if math.Float32bits(got[k]) != math.Float32bits(m.Data[o*cols+i]) {
			t.Fatalf("%v: W[%d][%d] (column %d) = %v, Dense %v", p.Type, o, i, j, got[k], m.Data[o*cols+i])
		}
	}
}

// checkGroupOrder checks that a permutation of the inputs lists them by their g_idx
// group, in ascending order within a group.
func checkGroupOrder(t *testing.T, s *Scheme, src Source, prefix string, perm []int32) {
	t.Helper()
	r := &reader{src: src, prefix: prefix}
	gt := r.tensor(".g_idx", 1, "I32", "I64")
	require.NoError(t, r.err)
	g := ints(gt)
	for j, i := range perm {
		if j > 0 {
			prev := perm[j-1]
			require.True(t, g[prev] < g[i] || g[prev] == g[i] && prev < i, "column %d: input %d (group %d) after %d (group %d)", j, i, g[i], prev, g[prev])
		}
	}
}

// TestPackedShared packs every quantized layer of the shared checkpoints: GPTQ
// 8-bit symmetric to Q8_0, compressed-tensors 4-bit symmetric to Q4_0, AWQ (zero
// points: q − z in [−15, 15], groups of 128) to Q4_Z128, GPTQ 4-bit asymmetric
// act-order (a real g_idx permutation, groups of 128) to Q4_Z128 with its inputs
// sorted by group, FP8 (128×128 blocks) to F8_E4M3_B128, each bit for bit Dense's
// values.
func TestPackedShared(t *testing.T) {
	want := map[string]struct {
		typ      dtype.DType
		permuted bool
	}{
		"gocoder-s-gptq8": {dtype.Q8_0, false}, "gocoder-m-w4a16": {dtype.Q4_0, false}, "gocoder-m-awq": {dtype.Q4_Z128, false},
		"gocoder-m-gptq": {dtype.Q4_Z128, true}, "gocoder-s-fp8": {dtype.F8_E4M3_B128, false},
	}
	for name, w := range want {
		typ := w.typ
		t.Run(name, func(t *testing.T) {
			dir := sharedtest.Path(t, "models", name)
			s, err := ReadConfig(dir)
			require.NoError(t, err)
			set, err := safetensors.OpenDir(dir)
			require.NoError(t, err)
			defer set.Close()
			n := 0
			for _, prefix := range quantizedLayers(s, set) {
				gotType, permuted := checkPacked(t, s, set, prefix)
				assert.Equal(t, typ, gotType, prefix)
				assert.Equal(t, w.permuted, permuted, prefix)
				n++
			}
			assert.Positive(t, n)
			t.Logf("%d layers: %v", n, typ)
		})
	}
}

// quantizedLayers returns the prefixes of a checkpoint's quantized linear layers.
func quantizedLayers(s *Scheme, set *safetensors.Set) []string {
	var out []string
	for _, name := range set.Names() {
		if p, packed, ok := s.LayerOf(set, name); ok && packed {
			out = append(out, p)
		}
	}
	return out
}

// TestPackedRules packs hand-built layers under each rule and each refusal.
func TestPackedRules(t *testing.T) {
	cases := []struct {
		name     string
		make     func(rng *rand.Rand) layer
		want     dtype.DType // 0: refused
		permuted bool        // the packing sorts the inputs by group
	}{
		{"gptq 8-bit sym g64 (z = 128)", func(r *rand.Rand) layer {
			return symmetric(gptqLayer(r, &Scheme{Method: GPTQ, Bits: 8, GroupSize: 64, Symmetric: true}, 8, 128), 8)
		}, dtype.Q8_0, false},
		{"gptq 4-bit sym per channel (z = 8)", func(r *rand.Rand) layer {
			return symmetric(gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, Symmetric: true}, 8, 96), 4)
		}, dtype.Q4_0, false},
		{"gptq 4-bit asym g32 (v1 zeros) to Q4_Z", func(r *rand.Rand) layer {
			return gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, GroupSize: 32, ZeroMinusOne: true}, 16, 96)
		}, dtype.Q4_Z, false},
		{"gptq 4-bit asym g64 (v2 zeros) to Q4_Z", func(r *rand.Rand) layer {
			return gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, GroupSize: 64}, 16, 128)
		}, dtype.Q4_Z, false},
		{"gptq v1 stored zero 15 (z = 16, q − z = −16): Q8_0", func(r *rand.Rand) layer {
			return storedZeros(gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, GroupSize: 32, ZeroMinusOne: true}, 8, 64), 4, 15)
		}, dtype.Q8_0, false},
		{"gptq 4-bit zeros 0 (q − z in [0, 15]) to Q4_Z", func(r *rand.Rand) layer {
			return storedZeros(gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, GroupSize: 32}, 8, 64), 4, 0)
		}, dtype.Q4_Z, false},
		{"ct 4-bit sym g32", func(r *rand.Rand) layer { return ctLayer(r, ctScheme(4, 32, true), 10, 96, false) }, dtype.Q4_0, false},
		{"ct 8-bit sym channel", func(r *rand.Rand) layer { return ctLayer(r, ctScheme(8, 0, true), 7, 64, false) }, dtype.Q8_0, false},
		{"awq g32: zero points, Q4_Z not Q4_0", func(r *rand.Rand) layer {
			return awqLayer(r, &Scheme{Method: AWQ, Bits: 4, GroupSize: 32}, 24, 96)
		}, dtype.Q4_Z, false},
		{"awq per channel to Q4_Z", func(r *rand.Rand) layer {
			return awqLayer(r, &Scheme{Method: AWQ, Bits: 4}, 16, 64)
		}, dtype.Q4_Z, false},
		{"awq g128, 512 inputs, to Q4_Z128", func(r *rand.Rand) layer {
			return awqLayer(r, &Scheme{Method: AWQ, Bits: 4, GroupSize: 128}, 24, 512)
		}, dtype.Q4_Z128, false},
		{"awq g256 to Q4_Z128", func(r *rand.Rand) layer {
			return awqLayer(r, &Scheme{Method: AWQ, Bits: 4, GroupSize: 256}, 8, 512)
		}, dtype.Q4_Z128, false},
		{"awq per channel, 256 inputs, to Q4_Z128", func(r *rand.Rand) layer {
			return awqLayer(r, &Scheme{Method: AWQ, Bits: 4}, 16, 256)
		}, dtype.Q4_Z128, false},
		{"awq g128, 384 inputs, to Q4_Z128", func(r *rand.Rand) layer {
			return awqLayer(r, &Scheme{Method: AWQ, Bits: 4, GroupSize: 128}, 8, 384)
		}, dtype.Q4_Z128, false},
		{"awq per channel, 96 inputs (not whole blocks of 128): Q4_Z", func(r *rand.Rand) layer {
			return awqLayer(r, &Scheme{Method: AWQ, Bits: 4}, 8, 96)
		}, dtype.Q4_Z, false},
		{"awq g64 (a run of 128 over two groups): Q4_Z", func(r *rand.Rand) layer {
			return awqLayer(r, &Scheme{Method: AWQ, Bits: 4, GroupSize: 64}, 8, 256)
		}, dtype.Q4_Z, false},
		{"gptq 4-bit asym g128 (v2 zeros) to Q4_Z128", func(r *rand.Rand) layer {
			return gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, GroupSize: 128}, 16, 256)
		}, dtype.Q4_Z128, false},
		{"gptq v1 g128 stored zero 15 (q − z = −16): Q8_0, not Q4_Z128", func(r *rand.Rand) layer {
			return storedZeros(gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, GroupSize: 128, ZeroMinusOne: true}, 8, 256), 4, 15)
		}, dtype.Q8_0, false},
		{"refused: awq group 16", func(r *rand.Rand) layer {
			return awqLayer(r, &Scheme{Method: AWQ, Bits: 4, GroupSize: 16}, 8, 64)
		}, 0, false},
		{"act-order g32 asym, sorted by group, to Q4_Z", func(r *rand.Rand) layer {
			return gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, GroupSize: 32, ZeroMinusOne: true, ActOrder: true}, 24, 128)
		}, dtype.Q4_Z, true},
		{"act-order g128 asym, sorted by group, to Q4_Z128", func(r *rand.Rand) layer {
			return gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, GroupSize: 128, ZeroMinusOne: true, ActOrder: true}, 16, 384)
		}, dtype.Q4_Z128, true},
		{"act-order g128 asym, 512 inputs, sorted by group, to Q4_Z128", func(r *rand.Rand) layer {
			return gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, GroupSize: 128, ZeroMinusOne: true, ActOrder: true}, 16, 512)
		}, dtype.Q4_Z128, true},
		{"act-order g32, stored zero 15: Q8_0, sorted by group", func(r *rand.Rand) layer {
			return storedZeros(gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, GroupSize: 32, ZeroMinusOne: true, ActOrder: true}, 8, 128), 4, 15)
		}, dtype.Q8_0, true},
		{"act-order g64 sym, sorted by group, to Q4_0", func(r *rand.Rand) layer {
			return symmetric(gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, GroupSize: 64, Symmetric: true, ActOrder: true}, 8, 192), 4)
		}, dtype.Q4_0, true},
		{"act-order in order (g_idx = i / g): no permutation", func(r *rand.Rand) layer {
			l := gptqLayer(r, &Scheme{Method: GPTQ, Bits: 4, GroupSize: 32, ZeroMinusOne: true}, 8, 96)
			l.scheme.ActOrder = true // its g_idx read, i / 32
			return l
		}, dtype.Q4_Z, false},
		{"refused: act-order group 16", func(r *rand.Rand) layer {
			return gptqLayer(r, &Scheme{Method: GPTQ, Bits: 8, GroupSize: 16, Symmetric: true, ActOrder: true}, 12, 64)
		}, 0, false},
		{"refused: ct g_idx", func(r *rand.Rand) layer { return ctLayer(r, ctScheme(4, 16, false), 8, 64, true) }, 0, false},
		{"refused: group 16", func(r *rand.Rand) layer {
			return gptqLayer(r, &Scheme{Method: GPTQ, Bits: 8, GroupSize: 16, Symmetric: true}, 12, 64)
		}, 0, false},
		{"refused: inputs not a multiple of 32", func(r *rand.Rand) layer { return ctLayer(r, ctScheme(4, 0, true), 9, 40, false) }, 0, false},
		{"refused: ct 8-bit asym (q − z past int8)", func(r *rand.Rand) layer {
			return wideZeros(ctLayer(r, ctScheme(8, 32, false), 6, 64, false))
		}, 0, false},
		{"f32 scales exact in f16", func(r *rand.Rand) layer {
			return f32Scales(ctLayer(r, ctScheme(4, 32, true), 4, 64, false), false)
		}, dtype.Q4_0, false},
		{"refused: f32 scale not exact in f16", func(r *rand.Rand) layer {
			return f32Scales(ctLayer(r, ctScheme(4, 32, true), 4, 64, false), true)
		}, 0, false},
		{"fp8 block 128, rows past the last whole block", func(r *rand.Rand) layer {
			return fp8Layer(r, &Scheme{Method: FP8, Bits: 8, Block: [2]int{128, 128}}, 130, 256)
		}, dtype.F8_E4M3_B128, false},
		{"fp8 block 16×256", func(r *rand.Rand) layer {
			return fp8Layer(r, &Scheme{Method: FP8, Bits: 8, Block: [2]int{16, 256}}, 40, 512)
		}, dtype.F8_E4M3_B128, false},
		{"fp8 per tensor", func(r *rand.Rand) layer { return fp8Layer(r, &Scheme{Method: FP8, Bits: 8}, 5, 384) }, dtype.F8_E4M3_B128, false},
		{"refused: fp8 inputs not a multiple of 128", func(r *rand.Rand) layer {
			return fp8Layer(r, &Scheme{Method: FP8, Bits: 8, Block: [2]int{4, 32}}, 8, 64)
		}, 0, false},
		{"refused: fp8 per tensor, 130 inputs", func(r *rand.Rand) layer { return fp8Layer(r, &Scheme{Method: FP8, Bits: 8}, 3, 130) }, 0, false},
		{"refused: fp8 blocks 64 wide", func(r *rand.Rand) layer {
			return fp8Layer(r, &Scheme{Method: FP8, Bits: 8, Block: [2]int{4, 64}}, 8, 128)
		}, 0, false},
		{"refused: fp8 scale 2^120", func(r *rand.Rand) layer {
			l := fp8Layer(r, &Scheme{Method: FP8, Bits: 8, Block: [2]int{128, 128}}, 4, 256)
			binary.LittleEndian.PutUint32(l.src[pre+".weight_scale_inv"].Data[4:], math.Float32bits(-dtype.F8MaxScale))
			return l
		}, 0, false},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := c.make(rand.New(rand.NewPCG(uint64(i), 29)))
			typ, permuted := checkPacked(t, l.scheme, l.src, pre)
			assert.Equal(t, c.want, typ)
			assert.Equal(t, c.permuted, permuted)
		})
	}
}

// symmetric rewrites a GPTQ v2 layer's zeros to 2^(bits−1), as a symmetric quantizer
// stores them.
func symmetric(l layer, bits int) layer { return storedZeros(l, bits, 1<<(bits-1)) }

// storedZeros rewrites every stored zero of a GPTQ layer to v.
func storedZeros(l layer, bits int, v int32) layer {
	qz := l.src[pre+".qzeros"]
	var w uint32
	for j := range 32 / bits {
		w |= uint32(v) << (bits * j)
	}
	z := make([]uint32, qz.Elements())
	for i := range z {
		z[i] = w
	}
	l.src[pre+".qzeros"] = wordTensor(z, qz.Shape...)
	return l
}

// wideZeros sets an 8-bit compressed-tensors layer's zero points to 0 (signed
// −128), so codes up to 255 − 0 … leave int8.
func wideZeros(l layer) layer {
	zp := l.src[pre+".weight_zero_point"]
	l.src[pre+".weight_zero_point"] = wordTensor(make([]uint32, zp.Elements()), zp.Shape...)
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

// TestPackZeroPer128 packs layers whose every block of 32 codes has a Q4_Z zero
// while a block of 128 has none (codes q − z from −15 to 15 in one group of 128):
// Q4_Z, not Q4_Z128; the same codes within [−7, 8] in every block: Q4_Z128. Both
// exact against the dense values.
func TestPackZeroPer128(t *testing.T) {
	for _, c := range []struct {
		lo, hi int32
		want   dtype.DType
	}{{-15, 15, dtype.Q4_Z}, {-7, 8, dtype.Q4_Z128}} {
		const rows, cols = 3, 512
		l := intLayer{rows: rows, cols: cols, groups: 2, codes: make([]int32, rows*cols),
			scales: []float32{0.5, 0.25, 1, 2, 0.125, 4}, gidx: runGroups(cols, 256)}
		for i := range l.codes {
			if i/32%2 == 0 {
				l.codes[i] = int32(i % 16) // a block of 32 in [0, 15]
				l.codes[i] = min(l.codes[i], c.hi)
			} else {
				l.codes[i] = -int32(i % 16) // one in [−15, 0]
				l.codes[i] = max(l.codes[i], c.lo)
			}
		}
		p, ok := l.packing()
		require.True(t, ok)
		assert.Equal(t, c.want, p.Type, "codes %d…%d", c.lo, c.hi)
		checkPacking(t, p, l.dense())
	}
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
