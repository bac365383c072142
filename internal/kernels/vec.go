package kernels

import (
	"encoding/binary"
	"math"

	"github.com/specula/specula/internal/vecmath"
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

// sigmoid is 1/(1+e^−x) by vecmath.ExpNeg (whose arithmetic siluMulAVX2 repeats),
// for either sign of x.
func sigmoid(x float32) float32 {
	if x >= 0 {
		return 1 / (1 + vecmath.ExpNeg(-x))
	}
	e := vecmath.ExpNeg(x)
	return e / (1 + e)
}

// Add adds x to y.
func Add(y, x []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += v
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
