package dtype

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The 32-value formats of llama.cpp (ggml's block_q8_0, q4_0, q4_1, q5_0, q5_1). Every
// field is little-endian; d and m are float16.
//
//   - Q8_0, 34 bytes: d, then 32 int8 codes q; value d·q.
//   - Q4_0, 18 bytes: d, then 16 bytes of 4-bit codes (value j in the low nibble of byte
//     j, value j+16 in the high nibble); value d·(q − 8).
//   - Q4_1, 20 bytes: d, m, then the Q4_0 nibbles; value d·q + m.
//   - Q5_0, 22 bytes: d, a uint32 qh whose bit j is the fifth bit of value j, then the
//     Q4_0 nibbles (the low four bits); value d·(q − 16).
//   - Q5_1, 24 bytes: d, m, qh, the nibbles; value d·q + m.
//
// and specula's own:
//
//   - Q4_Z, 20 bytes: d, a byte z (the zero, 0…15), a zero byte, then the Q4_0
//     nibbles; value float32(q − z)·d, exact (|q − z| ≤ 15 has 4 significant bits,
//     d 11). The pad byte keeps every block's d 2-byte aligned and its codes at
//     offset 4, as Q4_1's, in a row of blocks; the kernels repack the rows anyway
//     (to 19 bytes a block), so the byte costs nothing where it would count.
//   - Q4_Z128, 68 bytes: Q4_Z for 128 values — d, z, a zero byte, then 64 bytes of
//     nibbles in Q4_0's order (value j in the low nibble of byte j, value j+64 in the
//     high nibble); value float32(q − z)·d, exact. It holds a layer whose groups
//     cover whole runs of 128 inputs with one zero each (AWQ's and GPTQ's groups of
//     128) at 4.25 bits a weight, and the kernels take it on the K-quants'
//     activations (256 values a block), with integer sums over 128 values.
const (
	q8Block       = 32 // values per block of every 32-value format
	q8BlockBytes  = 34
	q4BlockBytes  = 18
	q41BlockBytes = 20
	q50BlockBytes = 22
	q51BlockBytes = 24
	q4zBlockBytes = 20
)

// zLayout is the block layout of a type of the Q4_Z family (Q4_Z, Q4_Z128): values
// and bytes per block. Every block is d, z, a zero byte, then values/2 bytes of
// nibbles (value j low in byte j, value j + values/2 high).
func zLayout(t DType) (values, size int, ok bool) {
	switch t {
	case Q4_Z:
		return q8Block, q4zBlockBytes, true
	case Q4_Z128:
		return 128, 4 + 64, true
	}
	return 0, 0, false
}

// EncodeQ4_Z writes one Q4_Z block to dst (20 bytes): the float16 scale d (its bits),
// the zero z and the 32 codes, each 0…15. Q4_Z has no quantizer from float32 values:
// it exists to hold integer-coded layers (AWQ, asymmetric GPTQ) exactly, from their
// codes, and any rounding of floats to it would be a format of its own.
func EncodeQ4_Z(dst []byte, d uint16, z uint8, codes []uint8) error {
	return encodeZ(Q4_Z, dst, d, z, codes)
}

// EncodeQ4_Z128 writes one Q4_Z128 block to dst (68 bytes): the float16 scale d (its
// bits), the zero z and the 128 codes, each 0…15. Like Q4_Z it is written from
// integer codes only.
func EncodeQ4_Z128(dst []byte, d uint16, z uint8, codes []uint8) error {
	return encodeZ(Q4_Z128, dst, d, z, codes)
}

// encodeZ writes one block of a Q4_Z-family type t.
func encodeZ(t DType, dst []byte, d uint16, z uint8, codes []uint8) error {
	n, size, _ := zLayout(t)
	if len(dst) < size || len(codes) != n {
		return fmt.Errorf("dtype: a %s block is %d codes into %d bytes, not %d into %d", t, n, size, len(codes), len(dst))
	}
	if z > 15 {
		return fmt.Errorf("dtype: %s zero %d is not in [0, 15]", t, z)
	}
	for j, c := range codes {
		if c > 15 {
			return fmt.Errorf("dtype: %s code %d is %d, not in [0, 15]", t, j, c)
		}
	}
	binary.LittleEndian.PutUint16(dst, d)
	dst[2], dst[3] = z, 0
	for j := range n / 2 {
		dst[4+j] = codes[j] | codes[j+n/2]<<4
	}
	return nil
}

// roundHalfAway rounds like C's roundf: halves away from zero.
func roundHalfAway(x float32) float32 {
	return float32(math.Round(float64(x)))
}

// QuantizeQ8_0 encodes src (a multiple of 32 values) into dst as Q8_0 blocks: per 32
// values a float16 scale d = max|x|/127 and the values rounded to x/d.
func QuantizeQ8_0(src []float32, dst []byte) {
	for b := 0; b < len(src)/q8Block; b++ {
		x := src[b*q8Block : (b+1)*q8Block]
		out := dst[b*q8BlockBytes : (b+1)*q8BlockBytes]
		var amax float32
		for _, v := range x {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := amax / 127
		id := reciprocal(d)
		binary.LittleEndian.PutUint16(out, F32ToF16(d))
		for j, v := range x {
			out[2+j] = byte(int8(roundHalfAway(v * id)))
		}
	}
}

// QuantizeQ4_0 encodes src (a multiple of 32 values) into dst as Q4_0 blocks: per 32
// values a float16 scale d = m/-8, where m is the value of largest magnitude, and
// 4-bit codes q = x/d + 8 (element j in the low nibble of byte j, element j+16 in the
// high nibble).
func QuantizeQ4_0(src []float32, dst []byte) {
	for b := 0; b < len(src)/q8Block; b++ {
		x := src[b*q8Block : (b+1)*q8Block]
		out := dst[b*q4BlockBytes : (b+1)*q4BlockBytes]
		d := largest(x) / -8
		id := reciprocal(d)
		binary.LittleEndian.PutUint16(out, F32ToF16(d))
		for j := range 16 {
			lo := min(15, int8(float32(x[j]*id)+8.5))
			hi := min(15, int8(float32(x[j+16]*id)+8.5))
			out[2+j] = byte(lo) | byte(hi)<<4
		}
	}
}

// reciprocal is 1/d, or 0 for the zero scale of an all-zero block, as the reference
// quantizers take it.
func reciprocal(d float32) float32 {
	if d == 0 {
		return 0
	}
	return 1 / d
}

// rangeScale writes the header of an offset format's block (Q4_1, Q5_1) for the
// values x and codes of the given number of levels above the minimum: d = (max −
// min)/levels and m = min, as float16. It returns the minimum and 1/d.
func rangeScale(x []float32, levels float32, out []byte) (lo, id float32) {
	lo, hi := blockRange(x)
	d := (hi - lo) / levels
	binary.LittleEndian.PutUint16(out, F32ToF16(d))
	binary.LittleEndian.PutUint16(out[2:], F32ToF16(lo))
	return lo, reciprocal(d)
}

// blockRange returns the smallest and largest of the values, as the reference
// quantizers of the offset formats (Q4_1, Q5_1) find them.
func blockRange(x []float32) (lo, hi float32) {
	lo, hi = math.MaxFloat32, -math.MaxFloat32
	for _, v := range x {
		lo = min(lo, v)
		hi = max(hi, v)
	}
	return lo, hi
}

// largest returns the value of largest magnitude (the first of several), as the
// reference quantizers of the symmetric formats find it.
func largest(x []float32) float32 {
	var amax, mx float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax, mx = a, v
		}
	}
	return mx
}

// QuantizeQ4_1 encodes src (a multiple of 32 values) into dst as Q4_1 blocks, as
// llama.cpp's quantize_row_q4_1_ref: d = (max − min)/15, m = min, codes (x − min)/d
// rounded half up.
func QuantizeQ4_1(src []float32, dst []byte) {
	for b := 0; b < len(src)/q8Block; b++ {
		x := src[b*q8Block : (b+1)*q8Block]
		out := dst[b*q41BlockBytes : (b+1)*q41BlockBytes]
		lo, id := rangeScale(x, 15, out)
		for j := range 16 {
			q0 := min(15, int8(float32((x[j]-lo)*id)+0.5))
			q1 := min(15, int8(float32((x[j+16]-lo)*id)+0.5))
			out[4+j] = byte(q0) | byte(q1)<<4
		}
	}
}

// QuantizeQ5_0 encodes src (a multiple of 32 values) into dst as Q5_0 blocks, as
// llama.cpp's quantize_row_q5_0_ref: d = m/−16 for the value m of largest magnitude,
// codes x/d + 16.
func QuantizeQ5_0(src []float32, dst []byte) {
	for b := 0; b < len(src)/q8Block; b++ {
		x := src[b*q8Block : (b+1)*q8Block]
		out := dst[b*q50BlockBytes : (b+1)*q50BlockBytes]
		d := largest(x) / -16
		id := reciprocal(d)
		binary.LittleEndian.PutUint16(out, F32ToF16(d))
		var codes [q8Block]uint8
		for j, v := range x {
			codes[j] = uint8(min(31, int8(float32(v*id)+16.5)))
		}
		packQ5(codes[:], out[2:6], out[6:22])
	}
}

// QuantizeQ5_1 encodes src (a multiple of 32 values) into dst as Q5_1 blocks, as
// llama.cpp's quantize_row_q5_1_ref: d = (max − min)/31, m = min, codes (x − min)/d
// rounded half up.
func QuantizeQ5_1(src []float32, dst []byte) {
	for b := 0; b < len(src)/q8Block; b++ {
		x := src[b*q8Block : (b+1)*q8Block]
		out := dst[b*q51BlockBytes : (b+1)*q51BlockBytes]
		lo, id := rangeScale(x, 31, out)
		var codes [q8Block]uint8
		for j, v := range x {
			codes[j] = uint8(float32((v-lo)*id) + 0.5) // no clamp, as the reference
		}
		packQ5(codes[:], out[4:8], out[8:24])
	}
}

// packQ5 stores 32 five-bit codes: their fifth bits in qh (bit j for code j), their low
// four bits in 16 bytes of nibbles.
func packQ5(codes []uint8, qh, qs []byte) {
	var h uint32
	for j := range 16 {
		qs[j] = codes[j]&0xf | codes[j+16]&0xf<<4
		h |= uint32(codes[j]>>4&1)<<j | uint32(codes[j+16]>>4&1)<<(j+16)
	}
	binary.LittleEndian.PutUint32(qh, h)
}

// q5Code returns the five-bit code j of a Q5 block from its qh word and nibbles.
func q5Code(qh uint32, qs []byte, j int) int {
	nib := qs[j%16] & 0xf
	if j >= 16 {
		nib = qs[j%16] >> 4
	}
	return int(nib) | int(qh>>j&1)<<4
}

// ZToQ8_0 re-encodes blocks of a Q4_Z-family type t (Q4_Z, Q4_Z128) as Q8_0 blocks
// of the same values, bit for bit: per 32 values the block's scale d and the codes
// q − z, which int8 holds (|q − z| ≤ 15; a zero past 15 is refused). For a consumer
// with Q8_0 kernels and none of t's, at about twice the bytes.
func ZToQ8_0(t DType, src []byte) ([]byte, error) {
	per, size, ok := zLayout(t)
	if !ok {
		return nil, fmt.Errorf("dtype: %s is not Q4_Z or Q4_Z128", t)
	}
	if len(src)%size != 0 {
		return nil, fmt.Errorf("dtype: %d bytes are not a whole number of %d-byte %s blocks", len(src), size, t)
	}
	n := len(src) / size
	sub := per / q8Block
	out := make([]byte, n*sub*q8BlockBytes)
	for b := range n {
		blk := src[b*size : (b+1)*size]
		z := int(blk[2])
		if z > 15 {
			return nil, fmt.Errorf("dtype: %s block %d has zero %d, not in [0, 15]", t, b, z)
		}
		for j := range per {
			dst := out[(b*sub+j/q8Block)*q8BlockBytes:]
			copy(dst, blk[:2])
			dst[2+j%q8Block] = byte(int8(zCode(blk, per, j) - z))
		}
	}
	return out, nil
}

// zCode is code j of a Q4_Z-family block of per values.
func zCode(blk []byte, per, j int) int {
	if j < per/2 {
		return int(blk[4+j] & 0xf)
	}
	return int(blk[4+j-per/2] >> 4)
}

// Encode stores float32 values as type t: F32, F16 and BF16 by conversion, the
// quantised types by their quantizers (len(vals) a multiple of the block size).
func Encode(t DType, vals []float32) ([]byte, error) {
	size, err := t.Bytes(int64(len(vals)))
	if err != nil {
		return nil, fmt.Errorf("dtype: %w", err)
	}
	out := make([]byte, size)
	switch t {
	case F32:
		for i, v := range vals {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		}
	case F16:
		for i, v := range vals {
			binary.LittleEndian.PutUint16(out[2*i:], F32ToF16(v))
		}
	case BF16:
		for i, v := range vals {
			binary.LittleEndian.PutUint16(out[2*i:], F32ToBF16(v))
		}
	case Q8_0:
		QuantizeQ8_0(vals, out)
	case Q4_0:
		QuantizeQ4_0(vals, out)
	case Q4_1:
		QuantizeQ4_1(vals, out)
	case Q5_0:
		QuantizeQ5_0(vals, out)
	case Q5_1:
		QuantizeQ5_1(vals, out)
	case Q4_K:
		QuantizeQ4_K(vals, out)
	case Q5_K:
		QuantizeQ5_K(vals, out)
	case Q6_K:
		QuantizeQ6_K(vals, out)
	case Q4_Z, Q4_Z128:
		return nil, fmt.Errorf("dtype: %s is written from integer codes (Encode%s), not quantised from float32 values", t, t)
	default:
		return nil, fmt.Errorf("dtype: cannot encode %s", t)
	}
	return out, nil
}

// Dequantize decodes n = len(dst) values of type t from src.
func Dequantize(t DType, src []byte, dst []float32) error {
	size, err := t.Bytes(int64(len(dst)))
	if err != nil {
		return fmt.Errorf("dtype: %w", err)
	}
	if int64(len(src)) < size {
		return fmt.Errorf("dtype: %d bytes of %s hold fewer than %d values", len(src), t, len(dst))
	}
	switch t {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case F16:
		for i := range dst {
			dst[i] = F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case BF16:
		for i := range dst {
			dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case Q8_0:
		for b := 0; b < len(dst)/q8Block; b++ {
			blk := src[b*q8BlockBytes:]
			d := F16ToF32(binary.LittleEndian.Uint16(blk))
			for j := range q8Block {
				dst[b*q8Block+j] = float32(int8(blk[2+j])) * d
			}
		}
	case Q4_0:
		for b := 0; b < len(dst)/q8Block; b++ {
			blk := src[b*q4BlockBytes:]
			d := F16ToF32(binary.LittleEndian.Uint16(blk))
			for j := range 16 {
				dst[b*q8Block+j] = float32(int(blk[2+j]&0xf)-8) * d
				dst[b*q8Block+j+16] = float32(int(blk[2+j]>>4)-8) * d
			}
		}
	case Q4_1:
		for b := 0; b < len(dst)/q8Block; b++ {
			blk := src[b*q41BlockBytes:]
			d := F16ToF32(binary.LittleEndian.Uint16(blk))
			m := F16ToF32(binary.LittleEndian.Uint16(blk[2:]))
			for j := range 16 {
				dst[b*q8Block+j] = float32(float32(blk[4+j]&0xf)*d) + m
				dst[b*q8Block+j+16] = float32(float32(blk[4+j]>>4)*d) + m
			}
		}
	case Q4_Z, Q4_Z128:
		per, bs, _ := zLayout(t)
		for b := 0; b < len(dst)/per; b++ {
			blk := src[b*bs:]
			d := F16ToF32(binary.LittleEndian.Uint16(blk))
			z := int(blk[2])
			for j := range per {
				dst[b*per+j] = float32(zCode(blk, per, j)-z) * d
			}
		}
	case Q5_0:
		for b := 0; b < len(dst)/q8Block; b++ {
			blk := src[b*q50BlockBytes:]
			d := F16ToF32(binary.LittleEndian.Uint16(blk))
			h := binary.LittleEndian.Uint32(blk[2:])
			for j := range q8Block {
				dst[b*q8Block+j] = float32(q5Code(h, blk[6:], j)-16) * d
			}
		}
	case Q5_1:
		for b := 0; b < len(dst)/q8Block; b++ {
			blk := src[b*q51BlockBytes:]
			d := F16ToF32(binary.LittleEndian.Uint16(blk))
			m := F16ToF32(binary.LittleEndian.Uint16(blk[2:]))
			h := binary.LittleEndian.Uint32(blk[4:])
			for j := range q8Block {
				dst[b*q8Block+j] = float32(float32(q5Code(h, blk[8:], j))*d) + m
			}
		}
	case F8_E4M3_B128:
		dequantizeF8(src, dst)
	default:
		return dequantizeK(t, src, dst)
	}
	return nil
}

// Requantize converts rows of cols values of a type the float kernels run (F32, F16,
// BF16, or FP8 as F8_E4M3_B128) in data to type to, as a model's or a draft head's
// weights are converted at load: the type and bytes to take in. Anything else —
// integer-coded already, no conversion asked (to 0), rows that are not whole blocks
// of to — is returned as it is.
func Requantize(t DType, data []byte, cols int, to DType) (DType, []byte, error) {
	if to == 0 || t == to || (t != F32 && t != F16 && t != BF16 && t != F8_E4M3_B128) || cols%to.BlockSize() != 0 {
		return t, data, nil
	}
	vals := make([]float32, len(data)/t.BlockBytes()*t.BlockSize())
	if err := Dequantize(t, data, vals); err != nil {
		return t, data, err
	}
	out, err := Encode(to, vals)
	if err != nil {
		return t, data, err
	}
	return to, out, nil
}
