//go:build arm64 && !purego

package kernels

import "github.com/specula/specula/format/dtype"

// The NEON float kernel tables, by the number of activation rows.
var (
	floatNEONF32  = floatTable{1: floatF32x1NEON, 2: floatF32x2NEON, 3: floatF32x3NEON}
	floatNEONF16  = floatTable{1: floatF16x1NEON, 2: floatF16x2NEON, 3: floatF16x3NEON}
	floatNEONBF16 = floatTable{1: floatBF16x1NEON, 2: floatBF16x2NEON, 3: floatBF16x3NEON}
)

// The float kernel tables: the NEON ones, or the pure-Go ones under SPECULA_CPU=generic.
var (
	floatF32  = pickFloat(dtype.F32, floatNEONF32)
	floatF16  = pickFloat(dtype.F16, floatNEONF16)
	floatBF16 = pickFloat(dtype.BF16, floatNEONBF16)
)

// pickFloat is pickInt for the float kernels.
func pickFloat(t dtype.DType, neon floatTable) floatTable {
	if hasNEON {
		return neon
	}
	return goFloatGroup(t)
}

// weightedSum is WeightedSum past its checks.
func weightedSum(w []float32, ldw int, v []float32, cnt int, out []float32, heads, _ int) {
	goWeightedSum(w, ldw, v, cnt, out, heads)
}

// scoreBlock is ScoreBlock past its checks.
func scoreBlock(kT []float32, hd int, q []float32, g int, out []float32, ldo, cnt int) {
	goScoreBlock(kT, hd, q, g, out, ldo, cnt)
}

// StreamRead reads b and returns a checksum: a probe of the memory bandwidth.
func StreamRead(b []byte) uint64 { return goStreamRead(b) }
