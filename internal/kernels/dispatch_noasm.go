//go:build !(amd64 || arm64) || purego

package kernels

import "github.com/specula/specula/format/dtype"

// Without assembly every product runs the pure-Go kernels.
var (
	floatF32  = goFloatGroup(dtype.F32)
	floatF16  = goFloatGroup(dtype.F16)
	floatBF16 = goFloatGroup(dtype.BF16)
	floatF8   = goFloatGroup(dtype.F8_E4M3_B128)

	intQ8_0    = goInt(dtype.Q8_0)
	intQ4_0    = goInt(dtype.Q4_0)
	intQ4_1    = goInt(dtype.Q4_1)
	intQ4_Z    = goInt(dtype.Q4_Z)
	intQ4_Z128 = goInt(dtype.Q4_Z128)
	intQ5_0    = goInt(dtype.Q5_0)
	intQ5_1    = goInt(dtype.Q5_1)
	intQ4_K    = goInt(dtype.Q4_K)
	intQ5_K    = goInt(dtype.Q5_K)
	intQ6_K    = goInt(dtype.Q6_K)
)

// Name names the instruction set of the kernels in use.
func Name() string { return "pure Go" }

// quantizeRow quantises the blocks of one row of activations (see act8.go).
func quantizeRow(x []float32, block int, codes []int8, side []uint32) {
	goQuantizeRow(x, block, codes, side)
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
