package dtype

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// encode turns float32 values into the bytes of type typ.
func encode(t testing.TB, typ DType, w []float32) []byte {
	out, err := Encode(typ, w)
	require.NoError(t, err)
	return out
}

// randVec returns n values drawn from the standard normal distribution.
func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// TestQuantizeRoundTrip encodes Gaussian values (a zero, an all-zero block among
// them) as Q8_0 and Q4_0 and decodes them within half a step of each block's scale.
func TestQuantizeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	x := randVec(rng, 32*64)
	x[5] = 0
	for i := 64; i < 96; i++ {
		x[i] = 0 // an all-zero block
	}
	for _, c := range []struct {
		typ DType
		tol float64 // relative to the block's largest magnitude
	}{{Q8_0, 0.6 / 127}, {Q4_0, 1.0 / 8}} { // half a step, plus the float16 rounding of the scale
		b := encode(t, c.typ, x)
		y := make([]float32, len(x))
		require.NoError(t, Dequantize(c.typ, b, y))
		for blk := 0; blk < len(x)/32; blk++ {
			var amax float64
			for _, v := range x[blk*32 : blk*32+32] {
				amax = max(amax, math.Abs(float64(v)))
			}
			for i := blk * 32; i < blk*32+32; i++ {
				require.InDelta(t, x[i], y[i], c.tol*amax*1.01+1e-7, "%s value %d", c.typ, i)
			}
		}
	}
}

// TestRequantize converts F32, F16 and BF16 rows to Q8_0 and back within Q8_0's
// error, and leaves alone what it is not asked to, or cannot, convert.
func TestRequantize(t *testing.T) {
	vals := make([]float32, 2*64)
	for i := range vals {
		vals[i] = float32(i%17-8) / 8
	}
	for _, typ := range []DType{F32, F16, BF16} {
		data, err := Encode(typ, vals)
		require.NoError(t, err)
		got, out, err := Requantize(typ, data, 64, Q8_0)
		require.NoError(t, err)
		require.Equal(t, Q8_0, got)
		back := make([]float32, len(vals))
		require.NoError(t, Dequantize(got, out, back))
		for i := range vals {
			require.InDelta(t, vals[i], back[i], 0.01, "%s value %d", typ, i)
		}
		for _, c := range []struct {
			cols int
			to   DType
		}{{64, 0}, {48, Q8_0}, {64, typ}} {
			same, d, err := Requantize(typ, data, c.cols, c.to)
			require.NoError(t, err)
			assert.Equal(t, typ, same, "%s cols %d to %v", typ, c.cols, c.to)
			assert.Equal(t, data, d)
		}
	}
}

// TestQ4_Z checks Q4_Z's bytes and values against ones worked out by hand: the
// layout (d, z, a zero byte, Q4_0's nibble order), value float32(q − z)·d, exact at
// the extremes q − z = ±15, and the encoder's refusals.
func TestQ4_Z(t *testing.T) {
	codes := make([]uint8, 32)
	for j := range codes {
		codes[j] = uint8(j % 16)
	}
	codes[0], codes[31] = 15, 0
	blk := make([]byte, 40)
	d := F32ToF16(0.0234375) // 3/128, exact in float16
	require.NoError(t, EncodeQ4_Z(blk, d, 7, codes))
	require.NoError(t, EncodeQ4_Z(blk[20:], F32ToF16(-2), 15, append([]uint8{0}, make([]uint8, 31)...)))
	want := []byte{0x00, 0x26, 7, 0, 0x0f, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0x0f}
	assert.Equal(t, want, blk[:20])
	got := make([]float32, 64)
	require.NoError(t, Dequantize(Q4_Z, blk, got))
	for j := range 32 {
		assert.Equal(t, float32(int(codes[j])-7)*0.0234375, got[j], "value %d", j)
	}
	assert.Equal(t, float32(8*0.0234375), got[0])
	assert.Equal(t, float32(-7*0.0234375), got[31])
	for j := 32; j < 64; j++ {
		assert.Equal(t, float32(30), got[j], "value %d: (0 − 15)·−2", j) // q − z = −15
	}
	for _, c := range []struct {
		name  string
		dst   int
		z     uint8
		codes []uint8
		err   string
	}{
		{"zero 16", 20, 16, codes, "zero 16"},
		{"code 16", 20, 0, append([]uint8{16}, codes[1:]...), "code 0 is 16"},
		{"31 codes", 20, 0, codes[:31], "32 codes"},
		{"short block", 19, 0, codes, "into 20 bytes"},
	} {
		assert.ErrorContains(t, EncodeQ4_Z(make([]byte, c.dst), 0, c.z, c.codes), c.err, c.name)
	}
	_, err := Encode(Q4_Z, make([]float32, 32))
	assert.ErrorContains(t, err, "integer codes")
}

// TestQ4_Z128 checks Q4_Z128's bytes and values against ones worked out by hand: d,
// z, a zero byte, then value j in the low nibble of byte j and value j+64 in the
// high one; value float32(q − z)·d; and the encoder's refusals.
func TestQ4_Z128(t *testing.T) {
	codes := make([]uint8, 128)
	for j := range codes {
		codes[j] = uint8(j % 16)
	}
	codes[0], codes[127] = 15, 0
	blk := make([]byte, 68)
	d := F32ToF16(0.0234375) // 3/128, exact in float16
	require.NoError(t, EncodeQ4_Z128(blk, d, 7, codes))
	assert.Equal(t, []byte{0x00, 0x26, 7, 0}, blk[:4])
	for j := range 64 {
		assert.Equal(t, codes[j]|codes[j+64]<<4, blk[4+j], "byte %d", j)
	}
	assert.Equal(t, byte(0x0f), blk[4])  // value 0 (15) low, value 64 (0) high
	assert.Equal(t, byte(0x0f), blk[67]) // value 63 (15) low, value 127 (0) high
	got := make([]float32, 128)
	require.NoError(t, Dequantize(Q4_Z128, blk, got))
	for j := range 128 {
		assert.Equal(t, float32(int(codes[j])-7)*0.0234375, got[j], "value %d", j)
	}
	for _, c := range []struct {
		name  string
		dst   int
		z     uint8
		codes []uint8
		err   string
	}{
		{"zero 16", 68, 16, codes, "zero 16"},
		{"code 16", 68, 0, append([]uint8{16}, codes[1:]...), "code 0 is 16"},
		{"32 codes", 68, 0, codes[:32], "128 codes"},
		{"short block", 67, 0, codes, "into 68 bytes"},
	} {
		assert.ErrorContains(t, EncodeQ4_Z128(make([]byte, c.dst), 0, c.z, c.codes), c.err, c.name)
	}
	_, err := Encode(Q4_Z128, make([]float32, 128))
	assert.ErrorContains(t, err, "integer codes")
}

// TestZToQ8_0: the Q8_0 copy of Q4_Z and Q4_Z128 blocks decodes to the same values,
// bit for bit, across every code and zero; a zero past 15, a partial block and
// another type are refused.
func TestZToQ8_0(t *testing.T) {
	for _, typ := range []DType{Q4_Z, Q4_Z128} {
		rng := rand.New(rand.NewPCG(11, 12))
		const blocks = 64
		per, size := typ.BlockSize(), typ.BlockBytes()
		src := make([]byte, blocks*size)
		codes := make([]uint8, per)
		for b := range blocks {
			for j := range codes {
				codes[j] = uint8(rng.IntN(16))
			}
			codes[0], codes[1] = 0, 15
			d := F32ToF16(float32(rng.NormFloat64()))
			require.NoError(t, encodeZ(typ, src[size*b:], d, uint8(b%16), codes))
		}
		q8, err := ZToQ8_0(typ, src)
		require.NoError(t, err)
		want, got := make([]float32, blocks*per), make([]float32, blocks*per)
		require.NoError(t, Dequantize(typ, src, want))
		require.NoError(t, Dequantize(Q8_0, q8, got))
		for i := range want {
			require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]), "%s value %d", typ, i)
		}
		src[size+2] = 16
		_, err = ZToQ8_0(typ, src)
		assert.ErrorContains(t, err, "block 1 has zero 16", typ)
		_, err = ZToQ8_0(typ, src[:size-1])
		assert.ErrorContains(t, err, "whole number", typ)
	}
	_, err := ZToQ8_0(Q4_0, make([]byte, 18))
	assert.ErrorContains(t, err, "not Q4_Z")
}
