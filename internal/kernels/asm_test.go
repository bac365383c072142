//go:build (amd64 || arm64) && !purego

package kernels

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/specula/specula/format/dtype"
)

// The assembly kernels against their pure-Go twins, on every architecture that has
// them; each architecture's test file names its kernel families (asmIntTables,
// asmQuantizers, asmFloatTables, asmScoreKernels) and says which this machine runs
// (familyRuns).

// signs is n values of ±1, by fours: the sign of value i is the parity of the bits of
// i/4, so that the four codes a kernel multiplies in one lane have the same sign (and
// their products the same direction) while every 32-value block holds both signs.
func signs(n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = 1
		if bits.OnesCount(uint(i/4))%2 == 1 {
			out[i] = -1
		}
	}
	return out
}

// extremeRows returns rows × cols weights of type typ of ±1 (signs' pattern) with
// every code at its extreme: encoded from the values, or for Q4_Z and Q4_Z128, which
// have no quantizer, codes 15 and 0 with zero 0 in even blocks (values 15d and 0) and
// 15 in odd ones (0 and −15d).
func extremeRows(t *testing.T, typ dtype.DType, rows, cols int) []byte {
	s := signs(rows * cols)
	if typ != dtype.Q4_Z && typ != dtype.Q4_Z128 {
		data, err := dtype.Encode(typ, s)
		require.NoError(t, err)
		return data
	}
	per, size := typ.BlockSize(), typ.BlockBytes()
	encode := dtype.EncodeQ4_Z
	if typ == dtype.Q4_Z128 {
		encode = dtype.EncodeQ4_Z128
	}
	out := make([]byte, len(s)/per*size)
	codes := make([]uint8, per)
	for b := range len(s) / per {
		for j := range codes {
			codes[j] = 0
			if s[per*b+j] > 0 {
				codes[j] = 15
			}
		}
		require.NoError(t, encode(out[size*b:], dtype.F32ToF16(1), uint8(15*(b%2)), codes))
	}
	return out
}

// TestIntAssemblyMatchesGo runs every assembly integer kernel and its pure-Go twin on
// the same repacked weights and quantised activations, for every number of activation
// rows it takes: the outputs must be the same bits.
func TestIntAssemblyMatchesGo(t *testing.T) {
	for family, tables := range asmIntTables() {
		t.Run(family, func(t *testing.T) {
			if ok, why := familyRuns(family); !ok {
				t.Skipf("%s kernels not tested: %s", family, why)
			}
			rng := rand.New(rand.NewPCG(7, 8))
			for _, typ := range quantTypes {
				asm, ok := tables[typ]
				if !ok {
					t.Logf("%s has no %s kernels", family, typ)
					continue
				}
				twin := goInt(typ)
				for _, cols := range []int{256, 1536, -256} {
					// cols < 0: weights and activations of ±1 with the same signs, every
					// code at its extreme and every product at its largest — where 16-bit
					// pair sums would saturate if a kernel let them.
					extreme := cols < 0
					cols = max(cols, -cols)
					rows := 16
					data := randRows(rng, typ, rows, cols)
					if extreme {
						data = extremeRows(t, typ, rows, cols)
					}
					m, err := NewMatrix(typ, rows, cols, data)
					require.NoError(t, err)
					for n := 1; n <= asm.rows(); n++ {
						x := randVec(rng, n*cols)
						for i := range x {
							x[i] *= float32(math.Exp(2 * rng.NormFloat64())) // a spread of block scales
						}
						if extreme {
							x = signs(n * cols)
						}
						var a Act
						a.Reset(x, n, cols)
						require.NoError(t, a.Prepare(typ))
						q := a.quant(typ.BlockSize())
						got, want := make([]float32, n*rowGroup), make([]float32, n*rowGroup)
						call := func(k intKernel, out []float32) {
							k(&m.Data[0], m.blocks, &q.codes[0], cols, &q.side[0], m.blocks*q.words, &out[0], rowGroup)
						}
						call(asm[n], got)
						call(twin[n], want)
						for i := range got {
							require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]),
								"%s %s cols %d n %d: output %d: asm %v, go %v", family, typ, cols, n, i, got[i], want[i])
						}
					}
				}
			}
		})
	}
}

// TestQuantizeAssemblyMatchesGo: the assembly quantizers write the codes and side data
// of the Go one, bit for bit, for rows of awkward values: zeros, ties, huge and tiny
// magnitudes.
func TestQuantizeAssemblyMatchesGo(t *testing.T) {
	for name, q := range asmQuantizers() {
		family, size, _ := strings.Cut(name, "/")
		t.Run(name, func(t *testing.T) {
			if ok, why := familyRuns(family); !ok {
				t.Skipf("%s quantizers not tested: %s", family, why)
			}
			block, err := strconv.Atoi(size)
			require.NoError(t, err)
			checkQuantizer(t, block, q)
		})
	}
}

// checkQuantizer compares a quantizer with the Go one on rows of awkward values: each
// value of a row may be zero, negative zero, huge, tiny, subnormal or a half-integer,
// and one block of each row takes a whole-block pattern in turn (quantBlockCases).
func checkQuantizer(t *testing.T, block int, quantize func(x *float32, blocks int, codes *int8, side *uint32)) {
	rng := rand.New(rand.NewPCG(9, 10))
	cases := quantBlockCases()
	for trial := range 200 {
		blocks := 1 + rng.IntN(12)
		x := randVec(rng, blocks*block)
		for i := range x {
			switch rng.IntN(14) {
			case 0:
				x[i] = 0
			case 1:
				x[i] *= 1e30
			case 2:
				x[i] *= 1e-30
			case 3:
				x[i] = float32(rng.IntN(9)-4) * 0.5 // ties, where the block's max makes them so
			case 4:
				x[i] = float32(math.Copysign(0, -1))
			case 5:
				x[i] = math.Float32frombits(rng.Uint32() & 0x807fffff) // subnormal or ±0
			}
		}
		b := rng.IntN(blocks) * block
		cases[trial%len(cases)](rng, x[b:b+block])
		matchQuantizer(t, block, quantize, x, fmt.Sprintf("trial %d, block at %d", trial, b))
	}
}

// quantBlockCases are whole-block patterns: a block of zeros, of negative zeros;
// exact ties (max 127·2^e, so that id = 2^−e, and values (k+½)·2^e); values at
// exactly ±max; subnormals under a max small enough for large codes but with 127/max
// finite; the largest float32; tiny values whose 127/max overflows (id capped).
func quantBlockCases() []func(rng *rand.Rand, b []float32) {
	return []func(rng *rand.Rand, b []float32){
		func(_ *rand.Rand, b []float32) { clear(b) },
		func(_ *rand.Rand, b []float32) {
			for i := range b {
				b[i] = float32(math.Copysign(0, -1))
			}
		},
		func(rng *rand.Rand, b []float32) {
			scale := float32(math.Ldexp(1, rng.IntN(40)-20))
			for i := range b {
				b[i] = (float32(rng.IntN(254)-127) + 0.5) * scale
			}
			b[rng.IntN(len(b))] = 127 * scale * float32(1-2*rng.IntN(2))
		},
		func(rng *rand.Rand, b []float32) {
			var amax float32
			for _, v := range b {
				amax = max(amax, float32(math.Abs(float64(v))))
			}
			for range 4 {
				b[rng.IntN(len(b))] = amax
				b[rng.IntN(len(b))] = -amax
			}
		},
		func(rng *rand.Rand, b []float32) {
			for i := range b {
				b[i] = math.Float32frombits(rng.Uint32() & 0x807fffff)
			}
			b[rng.IntN(len(b))] = -1e-36
		},
		func(rng *rand.Rand, b []float32) { b[rng.IntN(len(b))] = math.MaxFloat32 },
		func(rng *rand.Rand, b []float32) {
			// Tiny: max under 127/MaxFloat32, where id is capped; zeros among them.
			for i := range b {
				b[i] = math.Float32frombits(rng.Uint32() & 0x807fffff)
				if i%3 == 0 {
					b[i] = 0
				}
			}
			b[rng.IntN(len(b))] = []float32{1e-37, -2e-38, 1e-45}[rng.IntN(3)]
		},
	}
}

// matchQuantizer runs a quantizer and the Go one on the row x: the same codes and
// side data.
func matchQuantizer(t *testing.T, block int, quantize func(x *float32, blocks int, codes *int8, side *uint32), x []float32, what string) {
	t.Helper()
	blocks := len(x) / block
	words := sideWords(block)
	got, want := make([]int8, len(x)), make([]int8, len(x))
	gs, ws := make([]uint32, blocks*words), make([]uint32, blocks*words)
	quantize(&x[0], blocks, &got[0], &gs[0])
	goQuantizeRow(x, block, want, ws)
	require.Equal(t, want, got, "block %d, %s: codes", block, what)
	require.Equal(t, ws, gs, "block %d, %s: side data", block, what)
}

// TestFloatAssemblyMatchesGo runs every assembly float kernel and its pure-Go twin on
// the same repacked weights and activations, odd column counts included: the outputs
// must be the same bits (the twin's multiply-adds are fused, as the assembly's).
func TestFloatAssemblyMatchesGo(t *testing.T) {
	for family, tables := range asmFloatTables() {
		t.Run(family, func(t *testing.T) {
			if ok, why := familyRuns(family); !ok {
				t.Skipf("%s kernels not tested: %s", family, why)
			}
			rng := rand.New(rand.NewPCG(11, 12))
			for typ, asm := range tables {
				twin := goFloatGroup(typ)
				colsList := []int{1, 7, 64, 897}
				if typ == dtype.F8_E4M3_B128 {
					colsList = []int{128, 896, 1536} // whole 128-value blocks
				}
				for _, cols := range colsList {
					var data []byte
					if typ == dtype.F8_E4M3_B128 {
						data = f8Bytes(rng, rowGroup, cols)
					} else {
						data = encode(t, typ, randVec(rng, rowGroup*cols))
					}
					m, err := NewMatrix(typ, rowGroup, cols, data)
					require.NoError(t, err)
					compareFloatKernels(t, rng, m, asm, twin, family)
				}
			}
		})
	}
}

// compareFloatKernels runs the float kernels asm and twin on the group of m with
// random activations, for every number of rows asm takes: the same bits.
func compareFloatKernels(t *testing.T, rng *rand.Rand, m *Matrix, asm, twin floatTable, family string) {
	t.Helper()
	cols := m.Cols
	for n := 1; n <= asm.rows(); n++ {
		x := randVec(rng, n*cols)
		got, want := make([]float32, n*rowGroup), make([]float32, n*rowGroup)
		asm[n](&m.Data[0], cols, &x[0], 4*cols, &got[0], rowGroup)
		twin[n](&m.Data[0], cols, &x[0], 4*cols, &want[0], rowGroup)
		for i := range got {
			require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]),
				"%s %s cols %d n %d: output %d: asm %v, go %v", family, m.Type, cols, n, i, got[i], want[i])
		}
	}
}

// TestAttentionAssemblyMatchesGo runs the attention kernels of every family the CPU has
// against their pure-Go twins: scores of 1 to 8 heads against blocks of 16 keys, cut
// short or not, and weighted sums of value rows; the same bits.
func TestAttentionAssemblyMatchesGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for family, score := range asmScoreKernels() {
		t.Run(family, func(t *testing.T) {
			if ok, why := familyRuns(family); !ok {
				t.Skipf("%s kernels not tested: %s", family, why)
			}
			for _, hd := range []int{64, 128} {
				kT := randVec(rng, 16*hd)
				for g := 1; g < len(score); g++ {
					q := randVec(rng, g*hd)
					for _, cnt := range []int{1, 5, 16} {
						ldo := 37
						got, want := make([]float32, g*ldo), make([]float32, g*ldo)
						for i := range got {
							got[i], want[i] = -7, -7 // lanes past cnt must be left alone
						}
						score[g](&kT[0], hd, &q[0], &got[0], ldo, cnt)
						goScoreBlock(kT, hd, q, g, want, ldo, cnt)
						for i := range got {
							require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]), "%s scores hd %d g %d cnt %d: %d", family, hd, g, cnt, i)
						}
					}
				}
				for h := 1; h <= 8; h++ {
					cnt, ldw := 9, 11
					w, v := randVec(rng, h*ldw), randVec(rng, cnt*hd)
					got, want := randVec(rng, h*hd), make([]float32, h*hd)
					copy(want, got)
					WeightedSum(w, ldw, v, cnt, got, h)
					goWeightedSum(w, ldw, v, cnt, want, h)
					for i := range got {
						require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]), "weighted sum hd %d heads %d: %d", hd, h, i)
					}
				}
			}
		})
	}
}
