package kernels

import "math"

// fma32 returns a·b + c rounded once to float32, as a fused multiply-add instruction
// computes it (VFMADD231PS): the pure-Go twins of the float kernels use it so that they
// give the same bits as the assembly.
//
// a·b is exact in float64; s = a·b + c is rounded to float64 with error e (TwoSum), and
// rounding s again to float32 gives the correct result unless s fell exactly halfway
// between two float32 values while the exact sum did not: then e decides.
func fma32(a, b, c float32) float32 {
	if s := float64(a)*float64(b) + float64(c); safeToRound(s) {
		return float32(s)
	}
	return fma32Slow(a, b, c)
}

// safeToRound reports whether s, the float64 nearest an exact a·b + c of float32
// operands, rounds to float32 as the exact sum does: s is no float32 midpoint (its 29
// bits below float32's last are not 1000…0) and is in float32's normal range, so the
// exact sum lies on the same side of every midpoint. It is fma32's fast path, small
// enough to inline into the loops of the pure-Go kernels.
func safeToRound(s float64) bool {
	bits := math.Float64bits(s)
	return bits&(1<<29-1) != 1<<28 && bits>>52&0x7ff >= 1023-126
}

// fma32Slow is fma32 where rounding twice could go wrong.
func fma32Slow(a, b, c float32) float32 {
	p := float64(a) * float64(b)
	cc := float64(c)
	s := p + cc
	r := float32(s)
	if float64(r) == s || math.IsInf(s, 0) || math.IsNaN(s) {
		return r
	}
	bb := s - p
	e := (p - (s - bb)) + (cc - bb)
	if e == 0 {
		return r
	}
	// The other float32 neighbour of s, and whether s is their midpoint.
	other := math.Nextafter32(r, float32(math.Inf(1)))
	if float64(r) > s {
		other = math.Nextafter32(r, float32(math.Inf(-1)))
	}
	if (float64(r)+float64(other))/2 != s {
		return r
	}
	// s is a midpoint that float32(s) broke to even; the exact sum lies on e's side.
	if (e > 0) == (other > r) {
		return other
	}
	return r
}
