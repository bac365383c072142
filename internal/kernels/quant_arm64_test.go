//go:build arm64 && !purego

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// asmQuantizers are the assembly activation quantizers, by family and block size.
func asmQuantizers() map[string]func(x *float32, blocks int, codes *int8, side *uint32) {
	return map[string]func(x *float32, blocks int, codes *int8, side *uint32){
		"NEON/32":  quantize32NEON,
		"NEON/256": quantize256NEON,
	}
}

// TestQuantizeNEONNonFinite: the NEON quantizers against the Go one on blocks with a
// NaN or an infinity, where the Go one's codes come from NaN (max is NaN or +Inf, so
// id is 0 and Inf·0 is NaN): Go leaves that conversion to the platform, and on arm64
// it takes NaN to 0, as FCVTNS does. (Not in checkQuantizer: the amd64 kernels'
// conversions give −127 there, and non-finite activations are no part of the
// contract.)
func TestQuantizeNEONNonFinite(t *testing.T) {
	if ok, why := familyRuns("NEON"); !ok {
		t.Skipf("NEON quantizers not tested: %s", why)
	}
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	rng := rand.New(rand.NewPCG(15, 16))
	for name, q := range asmQuantizers() {
		block := q8Block
		if strings.HasSuffix(name, "/256") {
			block = kBlock
		}
		for i, special := range []float32{nan, inf, -inf} {
			x := randVec(rng, 3*block)
			b := x[block : 2*block]
			for k := range b {
				if k%3 == 0 {
					b[k] = 0
				}
			}
			b[5] = special
			matchQuantizer(t, block, q, x, fmt.Sprintf("%s case %d (%v)", name, i, special))
		}
	}
}
