//go:build arm64 && !purego

package kernels

// quantizeRow quantises the blocks of one row of activations (see act8.go).
func quantizeRow(x []float32, block int, codes []int8, side []uint32) {
	goQuantizeRow(x, block, codes, side)
}
