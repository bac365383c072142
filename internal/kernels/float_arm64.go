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
	// F8_E4M3_B128 has no NEON kernel yet: the pure-Go twin serves arm64.
	floatF8 = goFloatGroup(dtype.F8_E4M3_B128)
)

// pickFloat is pickInt for the float kernels.
func pickFloat(t dtype.DType, neon floatTable) floatTable {
	if hasNEON {
		return neon
	}
	return goFloatGroup(t)
}

// The NEON attention kernels, by the number of heads they take.
var (
	scoreNEON       = [scoreRowsNEON + 1]scoreKernel{1: score1NEON, 2: score2NEON, 3: score3NEON}
	weightedSumNEON = [5]weightedKernel{1: weightedSum1NEON, 2: weightedSum2NEON, 3: weightedSum3NEON, 4: weightedSum4NEON}
)

// scoreRowsNEON is how many heads a NEON score kernel takes.
const scoreRowsNEON = 3

// weightedSum is WeightedSum past its checks (v holds the cnt rows exactly): the NEON
// kernels take up to 4 heads a call, 16 dimensions at a time (hd a multiple of 16).
func weightedSum(w []float32, ldw int, v []float32, cnt int, out []float32, heads, hd int) {
	if !hasNEON || hd%16 != 0 {
		goWeightedSum(w, ldw, v, cnt, out, heads)
		return
	}
	for h := 0; h < heads; {
		b := min(len(weightedSumNEON)-1, heads-h)
		weightedSumNEON[b](&w[h*ldw], ldw, &v[0], cnt, &out[h*hd], hd)
		h += b
	}
}

// scoreBlock is ScoreBlock past its checks.
func scoreBlock(kT []float32, hd int, q []float32, g int, out []float32, ldo, cnt int) {
	if !hasNEON {
		goScoreBlock(kT, hd, q, g, out, ldo, cnt)
		return
	}
	for h := 0; h < g; h += scoreRowsNEON {
		scoreNEON[min(scoreRowsNEON, g-h)](&kT[0], hd, &q[h*hd], &out[h*ldo], ldo, cnt)
	}
}

// StreamRead reads b as the product kernels read their weights and returns a checksum:
// a probe of the memory bandwidth they can reach. Only the first len(b) rounded down
// to 256 bytes are read by the assembly; the rest by Go.
func StreamRead(b []byte) uint64 {
	n := len(b) &^ 255
	if !hasNEON || n == 0 {
		return goStreamRead(b)
	}
	return streamNEON(&b[0], n) + goStreamRead(b[n:])
}
