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
