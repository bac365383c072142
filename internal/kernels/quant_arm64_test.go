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

// TestQuantizeNEONTinyAndNonFinite: the NEON quantizers against the Go one where the
// Go one's codes come from NaN or ±Inf — blocks whose max is under 127/MaxFloat32
// (127/max is +Inf: the codes of zeros are NaN, the others ±Inf), blocks with a NaN
// or an infinity. Go leaves those conversions to the platform; on arm64 they saturate
// and take NaN to 0, as FCVTNS does. (Not in checkQuantizer: the amd64 kernels'
// conversions give −127 for all of them, unlike Go's.)
func TestQuantizeNEONTinyAndNonFinite(t *testing.T) {
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
		for i, special := range []float32{1e-37, -2e-38, 1e-45, nan, inf, -inf} {
			x := randVec(rng, 3*block)
			b := x[block : 2*block]
			for k := range b {
				if special < 1 && special > -1 {
					b[k] *= special // tiny: 127/max overflows
				}
				if k%3 == 0 {
					b[k] = 0
				}
			}
			b[5] = special
			matchQuantizer(t, block, q, x, fmt.Sprintf("%s case %d (%v)", name, i, special))
		}
	}
}
