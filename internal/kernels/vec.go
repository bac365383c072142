package kernels

import (
	"encoding/binary"
	"math"
)

// RMSNorm writes x / √(mean(x²) + eps) · w to dst.
func RMSNorm(dst, x, w []float32, eps float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	scale := float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
	for i, v := range x {
		dst[i] = v * scale * w[i]
	}
}

// Gather writes the rows of x, each of len(perm) values, into dst in the order perm
// gives: dst[t·c + j] = x[t·c + perm[j]] with c = len(perm), for every row t of x.
// It puts activations in the column order of a weight matrix whose columns were
// permuted (an act-order layer's inputs sorted by group), once per product, before
// they are quantized. perm must be a permutation of 0 … c−1.
func Gather(dst, x []float32, perm []int32) {
	c := len(perm)
	for t := 0; t+c <= len(x); t += c {
		row, out := x[t:t+c], dst[t:t+c]
		for j, i := range perm {
			out[j] = row[i]
		}
	}
}

// SiLUMul writes silu(gate) · up to dst, where silu(x) = x · sigmoid(x).
func SiLUMul(dst, gate, up []float32) {
	if hasAVX2 && len(gate) >= 8 {
		n := len(gate) &^ 7
		siluMulAVX2(dst[:n], gate[:n], up[:n])
		dst, gate, up = dst[n:], gate[n:], up[n:]
	}
	goSiLUMul(dst, gate, up)
}

// goSiLUMul is SiLUMul in Go: the definition, and the twin of siluMulAVX2.
func goSiLUMul(dst, gate, up []float32) {
	up = up[:len(gate)]
	dst = dst[:len(gate)]
	for i, g := range gate {
		dst[i] = g * sigmoid(g) * up[i]
	}
}

// GELUMul writes gelu(gate) · up to dst, GELU in its tanh form:
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), computed as x·sigmoid(2·√(2/π)·(x +
// 0.044715·x³)), which is the same function, by the sigmoid of SiLUMul.
func GELUMul(dst, gate, up []float32) {
	up = up[:len(gate)]
	dst = dst[:len(gate)]
	for i, g := range gate {
		dst[i] = g * sigmoid(geluK*(g+0.044715*g*g*g)) * up[i]
	}
}

// geluK is 2·√(2/π).
const geluK = 1.5957691216057308

// sigmoid is 1/(1+e^−x) by ExpNeg, for either sign of x.
func sigmoid(x float32) float32 {
	if x >= 0 {
		return 1 / (1 + ExpNeg(-x))
	}
	e := ExpNeg(x)
	return e / (1 + e)
}

// Add adds x to y.
func Add(y, x []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += v
	}
}

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

// goStreamRead sums the bytes of b, eight at a time where it can.
func goStreamRead(b []byte) uint64 {
	var s uint64
	for ; len(b) >= 8; b = b[8:] {
		s += binary.LittleEndian.Uint64(b)
	}
	for _, x := range b {
		s += uint64(x)
	}
	return s
}
