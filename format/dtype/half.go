package dtype

import "math"

// F16ToF32 converts an IEEE 754 half-precision value to float32, exactly.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0: // ±0
		return math.Float32frombits(sign)
	}
	// Subnormal: value = mant · 2^-24.
	f := float32(mant) * (1.0 / (1 << 24))
	if sign != 0 {
		return -f
	}
	return f
}

// F32ToF16 converts a float32 to half precision, rounding to nearest even, with
// overflow to ±Inf and NaN kept NaN.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	switch {
	case exp == 0xff:
		if mant != 0 {
			return sign | 0x7e00 // NaN
		}
		return sign | 0x7c00
	case exp > 142: // >= 2^16: overflow
		return sign | 0x7c00
	case exp >= 113: // normal half
		e := uint32(exp-112) << 10
		v := e | mant>>13
		rest := mant & 0x1fff
		if rest > 0x1000 || (rest == 0x1000 && v&1 == 1) {
			v++ // may carry into the exponent, up to Inf: correct
		}
		return sign | uint16(v)
	case exp >= 102: // subnormal half
		m := mant | 0x800000
		shift := uint32(126 - exp) // 14..24
		v := m >> shift
		rest := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rest > half || (rest == half && v&1 == 1) {
			v++
		}
		return sign | uint16(v)
	}
	return sign
}

// BF16ToF32 converts a bfloat16 value to float32, exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 converts a float32 to bfloat16, rounding to nearest even.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40 // NaN stays NaN
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}
