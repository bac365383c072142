// Package vecmath is the vector arithmetic of a softmax over float32 values: the
// largest value (Max), the exponentials shifted by it and their sum (ExpShifted, on
// ExpNeg), and a scaling (Scale). Each runs AVX2 assembly where the CPU has it and
// its pure-Go definition elsewhere, the assembly reproducing the Go arithmetic bit for
// bit. The sampler's softmax over the vocabulary runs on it, and so do the backends'
// attention softmax and the CPU kernels' SiLU (by ExpNeg). It imports nothing of
// specula's, so that any layer can use it without reaching the CPU backend's kernels.
package vecmath

import "math"

// ExpNeg is e^x for x <= 0 in float32, within two ulps (Cephes' expf polynomial on
// the reduced argument), and 0 below e^-87.3 where float32 loses normal numbers.
func ExpNeg(x float32) float32 {
	if !(x >= -87.33654) { // also -Inf and NaN
		return 0
	}
	n := int32(x*log2e - 0.5) // round(x·log2 e) for x <= 0
	fn := float32(n)
	r := x - fn*expC1
	r -= fn * expC2
	y := float32(1.9875691500e-4)
	y = y*r + 1.3981999507e-3
	y = y*r + 8.3334519073e-3
	y = y*r + 4.1665795894e-2
	y = y*r + 1.6666665459e-1
	y = y*r + 5.0000001201e-1
	y = y*r*r + r + 1
	return y * math.Float32frombits(uint32(n+127)<<23)
}

const (
	log2e = 1.44269504088896341
	expC1 = 0.693359375 // ln 2 = expC1 + expC2, split for an exact product with n
	expC2 = -2.12194440e-4
)

// ExpShifted replaces each x of v by e^((x−mx)·invT), with x <= mx, and returns the
// sum: the numerator of a softmax.
func ExpShifted(v []float32, mx, invT float32) float64 {
	if hasAVX2 && len(v) >= 8 {
		n := len(v) &^ 7
		expShiftedAVX2(v[:n], mx, invT)
		goExpShifted(v[n:], mx, invT)
		// The same sum, in the same order, as goExpShifted's.
		var total float64
		for _, e := range v {
			total += float64(e)
		}
		return total
	}
	return goExpShifted(v, mx, invT)
}

// goExpShifted is ExpShifted in Go: the definition, and the twin of expShiftedAVX2.
func goExpShifted(v []float32, mx, invT float32) float64 {
	var total float64
	for i, x := range v {
		e := ExpNeg((x - mx) * invT)
		v[i] = e
		total += float64(e)
	}
	return total
}

// Max returns the largest value of v: -Inf when v is empty, NaN when v holds a NaN,
// as a loop of Go's max would give (except that +0 and −0 may come back as either).
func Max(v []float32) float32 {
	mx := float32(math.Inf(-1))
	if hasAVX2 && len(v) >= 8 {
		n := len(v) &^ 7
		mx = maxAVX2(v[:n])
		v = v[n:]
	}
	for _, x := range v {
		mx = max(mx, x)
	}
	return mx
}

// Scale multiplies every value of v by s, one rounding each.
func Scale(v []float32, s float32) {
	if hasAVX2 && len(v) >= 8 {
		n := len(v) &^ 7
		scaleAVX2(v[:n], s)
		v = v[n:]
	}
	for i := range v {
		v[i] *= s
	}
}
