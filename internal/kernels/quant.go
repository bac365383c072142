package kernels

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/specula/specula/model/dtype"
)

// Block sizes of the 32-value formats.
const (
	q8Block      = 32 // values per Q8_0 / Q4_0 block
	q8BlockBytes = 34 // float16 scale + 32 int8
	q4BlockBytes = 18 // float16 scale + 16 bytes of nibbles
)

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
		id := float32(0)
		if d != 0 {
			id = 1 / d
		}
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
		var amax, mx float32
		for _, v := range x {
			if a := float32(math.Abs(float64(v))); a > amax {
				amax, mx = a, v
			}
		}
		d := mx / -8
		id := float32(0)
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(out, F32ToF16(d))
		for j := range 16 {
			lo := min(15, int8(x[j]*id+8.5))
			hi := min(15, int8(x[j+16]*id+8.5))
			out[2+j] = byte(lo) | byte(hi)<<4
		}
	}
}

// Encode stores float32 values as type t: F32, F16 and BF16 by conversion, the
// quantised types by their quantizers (len(vals) a multiple of the block size).
func Encode(t dtype.DType, vals []float32) ([]byte, error) {
	size, err := t.Bytes(int64(len(vals)))
	if err != nil {
		return nil, fmt.Errorf("kernels: %w", err)
	}
	out := make([]byte, size)
	switch t {
	case dtype.F32:
		for i, v := range vals {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		}
	case dtype.F16:
		for i, v := range vals {
			binary.LittleEndian.PutUint16(out[2*i:], F32ToF16(v))
		}
	case dtype.BF16:
		for i, v := range vals {
			binary.LittleEndian.PutUint16(out[2*i:], F32ToBF16(v))
		}
	case dtype.Q8_0:
		QuantizeQ8_0(vals, out)
	case dtype.Q4_0:
		QuantizeQ4_0(vals, out)
	case dtype.Q4_K:
		QuantizeQ4_K(vals, out)
	case dtype.Q6_K:
		QuantizeQ6_K(vals, out)
	default:
		return nil, fmt.Errorf("kernels: cannot encode %s", t)
	}
	return out, nil
}

// Dequantize decodes n = len(dst) values of type t from src.
func Dequantize(t dtype.DType, src []byte, dst []float32) error {
	size, err := t.Bytes(int64(len(dst)))
	if err != nil {
		return fmt.Errorf("kernels: %w", err)
	}
	if int64(len(src)) < size {
		return fmt.Errorf("kernels: %d bytes of %s hold fewer than %d values", len(src), t, len(dst))
	}
	switch t {
	case dtype.F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case dtype.F16:
		for i := range dst {
			dst[i] = F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case dtype.BF16:
		for i := range dst {
			dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case dtype.Q8_0:
		for b := 0; b < len(dst)/q8Block; b++ {
			blk := src[b*q8BlockBytes:]
			d := F16ToF32(binary.LittleEndian.Uint16(blk))
			for j := range q8Block {
				dst[b*q8Block+j] = float32(int8(blk[2+j])) * d
			}
		}
	case dtype.Q4_0:
		for b := 0; b < len(dst)/q8Block; b++ {
			blk := src[b*q4BlockBytes:]
			d := F16ToF32(binary.LittleEndian.Uint16(blk))
			for j := range 16 {
				dst[b*q8Block+j] = float32(int(blk[2+j]&0xf)-8) * d
				dst[b*q8Block+j+16] = float32(int(blk[2+j]>>4)-8) * d
			}
		}
	default:
		return dequantizeK(t, src, dst)
	}
	return nil
}
