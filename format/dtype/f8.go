package dtype

import (
	"encoding/binary"
	"fmt"
	"math"
)

// F8_E4M3_B128 is specula's own type for block-wise FP8 weights (DeepSeek-V3,
// Qwen3-FP8: float8_e4m3fn codes with a weight_scale_inv per 128×128 block), kept as
// they are stored rather than expanded to float32. A block is 128 consecutive values
// of a row: its float32 scale (the weight_scale_inv of the 128×128 block the values
// lie in), little-endian, then the 128 e4m3fn bytes; value j is E4M3(code j) · scale,
// rounded once to float32 — the value hfquant's dense expansion gives. 132 bytes per
// 128 values. A row whose length is not a multiple of 128 is refused (Bytes), not
// padded: such a layer stays float32 at load.
//
// The name is the safetensors type name of the codes, F8_E4M3, and B128 for the block
// of 128 values that shares a scale. The id is above every ggml id, so that it can
// never be confused with one; GGUF files cannot hold it ([DType.GGML]).
const F8_E4M3_B128 DType = 1001

// f8Block is the number of values of one F8_E4M3_B128 block.
const f8Block = 128

// E4M3 returns the value of a float8_e4m3fn byte: sign, 4 exponent bits with bias 7,
// 3 mantissa bits; exponent 0 is subnormal (m/8 · 2⁻⁶); no infinities; 0x7f and 0xff
// are NaN.
func E4M3(b byte) float32 {
	e, m := int(b>>3&15), float32(b&7)
	var v float32
	switch {
	case e == 15 && m == 7:
		return float32(math.NaN())
	case e == 0:
		v = m / 8 * (1.0 / 64)
	default:
		v = (1 + m/8) * float32(math.Ldexp(1, e-7))
	}
	if b&0x80 != 0 {
		return -v
	}
	return v
}

// E4M3Half returns the float16 whose value is exactly E4M3(b) · 2⁻⁸, for every byte
// but the NaN codes 0x7f and 0xff: the sign moves to bit 15 and the exponent and
// mantissa bits, eeeemmm, to bits 13…7. The two formats' exponent biases (7 and 15)
// differ by 8 and the e4m3 subnormals land on float16 subnormals of the same
// mantissa, so this is the whole conversion, which vector code does with a shift.
func E4M3Half(b byte) uint16 {
	return uint16(b&0x80)<<8 | uint16(b&0x7f)<<7
}

// F8MaxScale bounds the scales of F8_E4M3_B128 data that products take: they compute
// a weight as E4M3Half(code) · (scale · 2⁸), which is E4M3(code) · scale rounded
// once — exactly the decoded value — unless scale · 2⁸ overflows.
const F8MaxScale = 0x1p120

// CheckF8 checks that F8_E4M3_B128 data (whole blocks) can be multiplied exactly: no
// NaN code (0x7f, 0xff) and no finite scale of magnitude F8MaxScale or more. The error
// names the value or block.
func CheckF8(data []byte) error {
	const bb = 4 + f8Block
	if len(data)%bb != 0 {
		return fmt.Errorf("dtype: %d bytes are not whole %s blocks", len(data), F8_E4M3_B128)
	}
	for b := 0; b < len(data)/bb; b++ {
		blk := data[b*bb : (b+1)*bb]
		s := math.Float32frombits(binary.LittleEndian.Uint32(blk))
		if a := math.Abs(float64(s)); a >= F8MaxScale && !math.IsInf(a, 1) {
			return fmt.Errorf("dtype: %s block %d: scale %g is beyond the products' range (|scale| < 2^120)", F8_E4M3_B128, b, s)
		}
		for j, c := range blk[4:] {
			if c&0x7f == 0x7f {
				return fmt.Errorf("dtype: %s value %d: NaN code %#x", F8_E4M3_B128, b*f8Block+j, c)
			}
		}
	}
	return nil
}

// dequantizeF8 decodes F8_E4M3_B128 blocks: E4M3(code) · scale in float32.
func dequantizeF8(src []byte, dst []float32) {
	const bb = 4 + f8Block
	for b := 0; b < len(dst)/f8Block; b++ {
		blk := src[b*bb:]
		s := math.Float32frombits(binary.LittleEndian.Uint32(blk))
		for j, c := range blk[4:bb] {
			dst[b*f8Block+j] = E4M3(c) * s
		}
	}
}
