//go:build arm64 && !purego

package kernels

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/specula/specula/format/dtype"
)

// asmFloatTables are the assembly float kernels of each family, by type.
func asmFloatTables() map[string]map[dtype.DType]floatTable {
	return map[string]map[dtype.DType]floatTable{
		"NEON": {dtype.F32: floatNEONF32, dtype.F16: floatNEONF16, dtype.BF16: floatNEONBF16},
	}
}

// asmScoreKernels are the assembly attention score kernels of each family, by the
// number of heads they take (entry 0 unused).
func asmScoreKernels() map[string][]scoreKernel {
	return map[string][]scoreKernel{"NEON": scoreNEON[:]}
}

// TestFloatNEONHalfBits runs the NEON F16 and BF16 kernels against the twin on weights
// of random bit patterns — subnormals, zeros of both signs, infinities and values that
// overflow the sums included (NaN patterns left out: which NaN an operation passes on
// is no part of the contract) — so that every conversion is checked, not only those of
// normal numbers.
func TestFloatNEONHalfBits(t *testing.T) {
	if ok, why := familyRuns("NEON"); !ok {
		t.Skipf("NEON kernels not tested: %s", why)
	}
	rng := rand.New(rand.NewPCG(15, 16))
	for _, typ := range []dtype.DType{dtype.F16, dtype.BF16} {
		asm := asmFloatTables()["NEON"][typ]
		twin := goFloatGroup(typ)
		exp := uint16(0x7c00) // the exponent bits: all ones for an infinity or NaN
		if typ == dtype.BF16 {
			exp = 0x7f80
		}
		for _, cols := range []int{3, 64, 130} {
			data := make([]byte, 2*rowGroup*cols)
			for i := 0; i < len(data); i += 2 {
				h := uint16(rng.Uint32())
				if h&exp == exp && h&^(exp|0x8000) != 0 {
					h &^= 1 << 14 // a NaN becomes a finite number
				}
				binary.LittleEndian.PutUint16(data[i:], h)
			}
			m, err := NewMatrix(typ, rowGroup, cols, data)
			require.NoError(t, err)
			compareFloatKernels(t, rng, m, asm, twin, "NEON")
		}
	}
}

// TestStreamNEONMatchesGo: the NEON streaming read sums random bytes as goStreamRead
// does, whatever the length.
func TestStreamNEONMatchesGo(t *testing.T) {
	if ok, why := familyRuns("NEON"); !ok {
		t.Skipf("NEON kernels not tested: %s", why)
	}
	rng := rand.New(rand.NewPCG(17, 18))
	for _, n := range []int{256, 511, 4096 + 8, 1 << 20} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		require.Equal(t, goStreamRead(b), StreamRead(b), "%d bytes", n)
		require.Equal(t, goStreamRead(b[:n&^255]), streamNEON(&b[0], n&^255), "%d bytes, kernel alone", n)
	}
}
