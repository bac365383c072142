package dtype

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The layout tests build super-blocks byte by byte from llama.cpp's block_q4_K and
// block_q6_K definitions (ggml-common.h) and check decoded values worked out by hand
// from the reference dequantize_row_q4_K / dequantize_row_q6_K.

// TestQ4KLayout pins the Q4_K layout: d, dmin, the 6-bit scale/min packing (including
// the high bits of sub-blocks 4–7 kept in the top bits of bytes 0–7) and the nibble
// order (sub-block 2i in the low nibbles of bytes 32i…32i+31, 2i+1 in the high ones).
func TestQ4KLayout(t *testing.T) {
	sc := [8]int{1, 2, 3, 4, 17, 33, 50, 63}
	mn := [8]int{5, 6, 7, 8, 20, 40, 61, 19}
	blk := make([]byte, 144)
	binary.LittleEndian.PutUint16(blk[0:], 0x3c00) // d = 1
	binary.LittleEndian.PutUint16(blk[2:], 0x3800) // dmin = 0.5
	// The 12 scale bytes for sc and mn, packed by hand:
	// bytes 0–3: sc[j] | (sc[j+4]>>4)<<6, bytes 4–7: mn[j] | (mn[j+4]>>4)<<6,
	// bytes 8–11: sc[j+4]&15 | (mn[j+4]&15)<<4.
	copy(blk[4:16], []byte{0x41, 0x82, 0xc3, 0xc4, 0x45, 0x86, 0xc7, 0x48, 0x41, 0x81, 0xd2, 0x3f})
	for i := range 4 {
		for l := range 32 {
			lo := (i*32 + l) % 16
			hi := (l*7 + i) % 16
			blk[16+32*i+l] = byte(lo | hi<<4)
		}
	}
	y := make([]float32, 256)
	require.NoError(t, Dequantize(Q4_K, blk, y))

	// Hand-worked values: value v is in sub-block s = v/32; its code is the low (s
	// even) or high (s odd) nibble of qs[32·(s/2) + v%32]; y = 1·sc[s]·q − 0.5·mn[s].
	for _, c := range []struct {
		v    int
		want float32
	}{
		{0, -2.5},    // s 0, q 0: 0 − 2.5
		{37, 3},      // s 1, q = hi(qs[5]) = 35%16 = 3: 2·3 − 3
		{130, 24},    // s 4, q = lo(qs[66]) = 2: 17·2 − 10
		{170, 244},   // s 5, q = hi(qs[74]) = 72%16 = 8: 33·8 − 20
		{200, 369.5}, // s 6, q = lo(qs[104]) = 8: 50·8 − 30.5
		{255, 746.5}, // s 7, q = hi(qs[127]) = 220%16 = 12: 63·12 − 9.5
		{63, 15},     // s 1, q = hi(qs[31]) = 217%16 = 9: 2·9 − 3
	} {
		require.Equal(t, c.want, y[c.v], "value %d", c.v)
	}
	// Every value, from the formula written per value index.
	for v := range 256 {
		s := v / 32
		b := blk[16+32*(s/2)+v%32]
		q := int(b & 15)
		if s%2 == 1 {
			q = int(b >> 4)
		}
		require.Equal(t, float32(sc[s]*q)-0.5*float32(mn[s]), y[v], "value %d", v)
	}
	// The quantizer writes the same packing.
	x := make([]float32, 256)
	copy(x, y)
	out := make([]byte, 144)
	QuantizeQ4_K(x, out)
	y2 := make([]float32, 256)
	require.NoError(t, Dequantize(Q4_K, out, y2))
	for v := range y {
		require.InDelta(t, y[v], y2[v], 12, "re-quantised value %d", v) // one 4-bit step of the widest sub-block
	}
}

// TestQ6KLayout pins the Q6_K layout: ql, qh, the int8 scales and d at the end, and
// the interleave of the two 128-value halves.
func TestQ6KLayout(t *testing.T) {
	scales := [16]int8{1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12, 13, -14, 127, -128}
	code := func(v int) int { return (v*37 + 11) % 64 }
	blk := make([]byte, 210)
	// Value v = 128h + 32p + l (p = 0…3, l < 32): low 4 bits in ql[64h + 32(p%2) + l],
	// the low nibble for p < 2 and the high one for p ≥ 2; high 2 bits in bits 2p, 2p+1
	// of qh[32h + l].
	for v := range 256 {
		h, p, l := v/128, v%128/32, v%32
		q := code(v)
		i := 64*h + 32*(p%2) + l
		if p < 2 {
			blk[i] |= byte(q & 15)
		} else {
			blk[i] |= byte(q&15) << 4
		}
		blk[128+32*h+l] |= byte(q>>4) << (2 * p)
	}
	for g, s := range scales {
		blk[192+g] = byte(s)
	}
	binary.LittleEndian.PutUint16(blk[208:], 0x3c00) // d = 1
	y := make([]float32, 256)
	require.NoError(t, Dequantize(Q6_K, blk, y))
	for _, c := range []struct {
		v    int
		want float32
	}{
		{0, -21},     // q 11, scale 1
		{45, -60},    // q 12, scale 3
		{100, 217},   // q 63, scale 7
		{230, -2921}, // q 9, scale 127
		{255, -768},  // q 38, scale −128
	} {
		require.Equal(t, c.want, y[c.v], "value %d", c.v)
	}
	for v := range 256 {
		require.Equal(t, float32(int(scales[v/16])*(code(v)-32)), y[v], "value %d", v)
	}
	// d scales everything: d = 0.25.
	binary.LittleEndian.PutUint16(blk[208:], 0x3400)
	require.NoError(t, Dequantize(Q6_K, blk, y))
	require.Equal(t, float32(-0.25*2921), y[230])
}

// TestKQuantRoundTrip bounds the error of Dequantize(Quantize(x)).
//
// Q4_K: within one 4-bit step, (hi − lo)/15 of the 32-value sub-block's range
// [min(x, 0), max(x, 0)] (×1.1 for the 6-bit rounding of the scale and min).
// Q6_K: within 0.8 of a 6-bit step, amax/32 of the 16-value group.
// Blocks of zeros decode to zeros; constant blocks to the constant within float16
// rounding; blocks with outliers within a looser bound that adds the rounding of
// each sub-block's scale and min against the super-block's largest.
func TestKQuantRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const blocks = 64
	x := randVec(rng, 256*blocks)
	for i := 256 * 8; i < 256*16; i++ {
		x[i] *= 1000 // large values
	}
	// Special blocks after the Gaussian ones.
	special := map[int]string{}
	put := func(name string, f func(i int) float32) {
		b := len(x) / 256
		for i := range 256 {
			x = append(x, f(i))
		}
		special[b] = name
	}
	put("zeros", func(int) float32 { return 0 })
	put("constant 0.75", func(int) float32 { return 0.75 })
	put("constant -3", func(int) float32 { return -3 })
	put("constant 20000", func(int) float32 { return 20000 })
	put("positive", func(i int) float32 { return 5 + float32(rng.NormFloat64()) })
	put("negative", func(i int) float32 { return -5 + float32(rng.NormFloat64()) })
	put("one outlier", func(i int) float32 {
		if i == 77 {
			return 300
		}
		return float32(rng.NormFloat64())
	})
	put("one negative outlier", func(i int) float32 {
		if i == 200 {
			return -300
		}
		return float32(rng.NormFloat64())
	})
	put("sparse", func(i int) float32 {
		if i%37 == 0 {
			return float32(rng.NormFloat64())
		}
		return 0
	})
	put("extremes ±60000", func(i int) float32 {
		if i%2 == 0 {
			return 60000
		}
		return -60000
	})

	for _, typ := range []DType{Q4_K, Q6_K} {
		b := encode(t, typ, x)
		y := make([]float32, len(x))
		require.NoError(t, Dequantize(typ, b, y))
		for blk := 0; blk < len(x)/256; blk++ {
			xs, ys := x[256*blk:256*blk+256], y[256*blk:256*blk+256]
			name, isSpecial := special[blk]
			var rangeMax, minMax, amax float64
			for s := range 8 {
				lo, hi := bounds(xs[32*s : 32*s+32])
				rangeMax, minMax = max(rangeMax, hi-lo), max(minMax, -lo)
			}
			for _, v := range xs {
				amax = max(amax, math.Abs(float64(v)))
			}
			for i := range 256 {
				var bound float64
				switch {
				case name == "zeros":
					bound = 0
				case strings.HasPrefix(name, "constant"):
					bound = math.Abs(float64(xs[i])) * 1e-3
				case typ == Q4_K:
					lo, hi := bounds(xs[i/32*32 : i/32*32+32])
					bound = 1.1 * (hi - lo) / 15
					if isSpecial {
						bound += (rangeMax + minMax) / 100
					}
				default:
					_, a := bounds(absAll(xs[i/16*16 : i/16*16+16]))
					bound = 0.8 * a / 32
					if isSpecial {
						bound = a/32 + amax/200
					}
				}
				require.LessOrEqual(t, math.Abs(float64(ys[i]-xs[i])), bound,
					"%s block %d (%s) value %d: %v decodes to %v", typ, blk, name, i, xs[i], ys[i])
			}
		}
	}
}

func bounds(x []float32) (lo, hi float64) {
	for _, v := range x {
		lo, hi = min(lo, float64(v)), max(hi, float64(v))
	}
	return lo, hi
}

func absAll(x []float32) []float32 {
	a := make([]float32, len(x))
	for i, v := range x {
		a[i] = float32(math.Abs(float64(v)))
	}
	return a
}

// TestKQuantRMS measures the quantisation error of each quantised type on Gaussian
// data (relative RMS: rms(y − x)/σ) and checks that the K-quants sit where they
// should: Q8_0 < Q6_K < Q4_K < Q4_0.
func TestKQuantRMS(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	x := randVec(rng, 256*1024)
	rms := map[DType]float64{}
	for _, typ := range []DType{Q8_0, Q6_K, Q4_K, Q4_0} {
		y := make([]float32, len(x))
		require.NoError(t, Dequantize(typ, encode(t, typ, x), y))
		var se, sx float64
		for i := range x {
			d := float64(y[i] - x[i])
			se += d * d
			sx += float64(x[i]) * float64(x[i])
		}
		rms[typ] = math.Sqrt(se / sx)
		t.Logf("%s: relative RMS error %.4f (%.2f bits per weight)", typ, rms[typ], float64(8*typ.BlockBytes())/float64(typ.BlockSize()))
	}
	require.Less(t, rms[Q8_0], rms[Q6_K])
	require.Less(t, rms[Q6_K], 0.02)
	require.Less(t, rms[Q6_K], rms[Q4_K])
	require.Less(t, rms[Q4_K], 0.075)
	require.Less(t, rms[Q4_K], rms[Q4_0])
}

// TestQuantMatchesLlamaCpp checks every quantised format against llama.cpp itself:
// testdata/quant_llamacpp.bin holds inputs, the blocks llama.cpp's reference
// quantizers wrote for them and llama.cpp's decoding of those blocks (see
// testdata/quant_llamacpp.py). Dequantize must reproduce llama.cpp's values exactly, and
// Encode must write the same bytes as llama.cpp's quantize_row_<type>_ref.
func TestQuantMatchesLlamaCpp(t *testing.T) {
	raw, err := os.ReadFile("testdata/quant_llamacpp.bin")
	require.NoError(t, err)
	require.Equal(t, "QLC2", string(raw[:4]))
	le := binary.LittleEndian
	n, types := int(le.Uint32(raw[4:])), int(le.Uint32(raw[8:]))
	raw = raw[12:]
	floats := func(b []byte) []float32 {
		out := make([]float32, len(b)/4)
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(b[4*i:]))
		}
		return out
	}
	x := floats(raw[:4*n])
	raw = raw[4*n:]
	seen := map[DType]bool{}
	for range types {
		typ, size := DType(le.Uint32(raw)), int(le.Uint32(raw[4:]))
		theirs := raw[8 : 8+size]
		theirY := floats(raw[8+size : 8+size+4*n])
		raw = raw[8+size+4*n:]
		seen[typ] = true

		y := make([]float32, n)
		require.NoError(t, Dequantize(typ, theirs, y))
		for i := range y {
			require.Equal(t, math.Float32bits(theirY[i]), math.Float32bits(y[i]), "%s: value %d of llama.cpp's blocks: %v, want %v", typ, i, y[i], theirY[i])
		}
		ours, err := Encode(typ, x)
		require.NoError(t, err)
		bs := typ.BlockBytes()
		for b := range size / bs {
			require.Equal(t, theirs[b*bs:(b+1)*bs], ours[b*bs:(b+1)*bs], "%s: block %d differs from llama.cpp's reference quantizer", typ, b)
		}
	}
	for _, typ := range []DType{Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K} {
		assert.True(t, seen[typ], "%s is missing from the reference file", typ)
	}
}
