//go:build arm64 && !purego

package kernels

// asmQuantizers are the assembly activation quantizers, by family and block size.
func asmQuantizers() map[string]func(x *float32, blocks int, codes *int8, side *uint32) {
	return map[string]func(x *float32, blocks int, codes *int8, side *uint32){
		"NEON/32":  quantize32NEON,
		"NEON/256": quantize256NEON,
	}
}
