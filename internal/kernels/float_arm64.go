//go:build arm64 && !purego

package kernels

import "github.com/specula/specula/format/dtype"

// The float kernel tables.
var (
	floatF32  = goFloatGroup(dtype.F32)
	floatF16  = goFloatGroup(dtype.F16)
	floatBF16 = goFloatGroup(dtype.BF16)
)

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
