package dtype

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
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

func TestE4M3(t *testing.T) {
	for b := range 256 {
		got := E4M3(byte(b))
		if b&0x7f == 0x7f {
			assert.True(t, math.IsNaN(float64(got)), "%#x", b)
			continue
		}
		assert.Equal(t, refE4M3(byte(b)), float64(got), "%#x", b)
	}
	assert.Equal(t, float32(448), E4M3(0x7e))
	assert.Equal(t, float32(1), E4M3(0x38))
	assert.Equal(t, float32(math.Ldexp(1, -9)), E4M3(0x01))
}

// f8Scales are scales the products must take exactly: ordinary ones, powers of two,
// float32 subnormals, the largest below F8MaxScale, zero and negative zero.
func f8Scales(rng *rand.Rand) []float32 {
	s := []float32{1, 0.5, 3e-4, -2.5e-3, 1.0 / 448, float32(math.Ldexp(1, -149)), 1e-40, -3e-39,
		math.Nextafter32(F8MaxScale, 0), -math.Nextafter32(F8MaxScale, 0), 1e30, 0, float32(math.Copysign(0, -1))}
	for range 200 {
		s = append(s, float32(math.Ldexp(rng.Float64()+0.5, rng.IntN(268)-150)))
	}
	return s
}

// TestE4M3Half checks the conversion the kernels make, over all 256 codes: the float16
// E4M3Half(b) is exactly E4M3(b) · 2⁻⁸, and with a scale s below F8MaxScale,
// half · (s · 2⁸) rounded to float32 is E4M3(b) · s rounded to float32, bit for bit.
func TestE4M3Half(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	scales := f8Scales(rng)
	for b := range 256 {
		if b&0x7f == 0x7f {
			continue
		}
		h := F16ToF32(E4M3Half(byte(b)))
		require.Equal(t, math.Ldexp(refE4M3(byte(b)), -8), float64(h), "%#x", b)
		require.Equal(t, math.Signbit(float64(E4M3(byte(b)))), math.Signbit(float64(h)), "%#x", b)
		for _, s := range scales {
			want := E4M3(byte(b)) * s
			got := h * float32(s*256)
			require.Equal(t, math.Float32bits(want), math.Float32bits(got), "%#x · %g", b, s)
		}
	}
}

// f8Data makes F8_E4M3_B128 blocks of random non-NaN codes and the given scales.
func f8Data(rng *rand.Rand, scales []float32) []byte {
	out := make([]byte, len(scales)*(4+f8Block))
	for b, s := range scales {
		blk := out[b*(4+f8Block):]
		binary.LittleEndian.PutUint32(blk, math.Float32bits(s))
		for j := range f8Block {
			c := byte(rng.IntN(256))
			if c&0x7f == 0x7f {
				c ^= 1
			}
			blk[4+j] = c
		}
	}
	return out
}

func TestF8Layout(t *testing.T) {
	assert.Equal(t, "F8_E4M3_B128", F8_E4M3_B128.String())
	assert.Equal(t, 128, F8_E4M3_B128.BlockSize())
	assert.Equal(t, 132, F8_E4M3_B128.BlockBytes())
	p, err := Parse("F8_E4M3_B128")
	require.NoError(t, err)
	assert.Equal(t, F8_E4M3_B128, p)
	_, err = F8_E4M3_B128.Bytes(100)
	assert.ErrorContains(t, err, "whole number of 128-value blocks")
	assert.False(t, F8_E4M3_B128.GGML())
	assert.True(t, Q8_0.GGML())
	assert.False(t, DType(99).GGML())
	_, err = Encode(F8_E4M3_B128, make([]float32, 128))
	assert.ErrorContains(t, err, "cannot encode")
}

// TestF8Dequantize: value j of block b is E4M3(code) · scale rounded to float32, as
// refE4M3 computes it in float64 and rounds once.
func TestF8Dequantize(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	scales := f8Scales(rng)
	data := f8Data(rng, scales)
	got := make([]float32, len(scales)*f8Block)
	require.NoError(t, Dequantize(F8_E4M3_B128, data, got))
	require.NoError(t, CheckF8(data))
	for b, s := range scales {
		for j := range f8Block {
			want := float32(refE4M3(data[b*(4+f8Block)+4+j]) * float64(s))
			require.Equal(t, math.Float32bits(want), math.Float32bits(got[b*f8Block+j]), "block %d value %d", b, j)
		}
	}
}

func TestCheckF8(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct {
		name  string
		edit  func(d []byte)
		err   string
		extra int
	}{
		{"NaN code", func(d []byte) { d[132+4+9] = 0x7f }, "value 137: NaN code 0x7f", 0},
		{"negative NaN", func(d []byte) { d[4] = 0xff }, "value 0: NaN code 0xff", 0},
		{"huge scale", func(d []byte) { binary.LittleEndian.PutUint32(d[132:], math.Float32bits(-F8MaxScale)) }, "block 1: scale", 0},
		{"infinite scale", func(d []byte) { binary.LittleEndian.PutUint32(d, math.Float32bits(float32(math.Inf(1)))) }, "", 0},
		{"cut", func([]byte) {}, "not whole", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := append(f8Data(rng, []float32{1, 2}), make([]byte, c.extra)...)
			c.edit(d)
			err := CheckF8(d)
			if c.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, c.err)
		})
	}
}
