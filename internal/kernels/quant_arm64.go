//go:build arm64 && !purego

package kernels

// quantizeRow quantises the blocks of one row of activations (see act8.go): the NEON
// quantizers where the CPU has them (every arm64 one, unless SPECULA_CPU=generic).
func quantizeRow(x []float32, block int, codes []int8, side []uint32) {
	if !hasNEON || len(x) == 0 || block == z128Block { // Q4_Z128's blocks: the Go quantizer
		goQuantizeRow(x, block, codes, side)
		return
	}
	blocks := len(x) / block
	_, _ = codes[len(x)-1], side[len(side)-1] // bounds, checked once
	if block == kBlock {
		quantize256NEON(&x[0], blocks, &codes[0], &side[0])
		return
	}
	quantize32NEON(&x[0], blocks, &codes[0], &side[0])
}
