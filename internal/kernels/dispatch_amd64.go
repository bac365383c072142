//go:build amd64 && !purego

package kernels

import (
	"os"

	"golang.org/x/sys/cpu"

	"github.com/specula/specula/format/dtype"
)

//go:generate sh -c "cd _gen && GOWORK=off go run . -out ../dot_amd64.s -stubs ../dot_amd64_stubs.go -pkg kernels"
//go:generate sh -c "cd _gen && GOWORK=off go run . -set avx512 -out ../int512_amd64.s -stubs ../int512_amd64_stubs.go -pkg kernels"
//go:generate sh -c "cd _gen && GOWORK=off go run . -set avx512bw -out ../int512bw_amd64.s -stubs ../int512bw_amd64_stubs.go -pkg kernels"

// hasAVX2 reports whether the generated kernels can run: they use AVX2, FMA and F16C.
var hasAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasAVX && cpu.X86.HasF16C &&
	os.Getenv("SPECULA_CPU") != "generic"

// hasAVX512 reports whether the AVX-512 kernels can run: they use AVX-512 F, BW (byte
// and word operations, byte masks), DQ and VL, which every AVX-512 server CPU since
// Skylake-SP has.
var hasAVX512 = hasAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512DQ &&
	cpu.X86.HasAVX512VL && os.Getenv("SPECULA_CPU") != "avx2"

// hasVNNI reports whether the AVX-512 VNNI integer kernels can run (VPDPBUSD); the
// AVX-512 machines without it (Skylake-SP/X) run the BW ones.
var hasVNNI = hasAVX512 && cpu.X86.HasAVX512VNNI && os.Getenv("SPECULA_CPU") != "avx512bw"

// The AVX-512 integer kernel tables, indexed by the number of activation rows.
var (
	int512Q8_0    = intTable{1: intQ8_0x1AVX512, 2: intQ8_0x2AVX512, 3: intQ8_0x3AVX512, 4: intQ8_0x4AVX512, 5: intQ8_0x5AVX512, 6: intQ8_0x6AVX512, 7: intQ8_0x7AVX512, 8: intQ8_0x8AVX512}
	int512Q4_0    = intTable{1: intQ4_0x1AVX512, 2: intQ4_0x2AVX512, 3: intQ4_0x3AVX512, 4: intQ4_0x4AVX512, 5: intQ4_0x5AVX512, 6: intQ4_0x6AVX512, 7: intQ4_0x7AVX512, 8: intQ4_0x8AVX512}
	int512Q4_1    = intTable{1: intQ4_1x1AVX512, 2: intQ4_1x2AVX512, 3: intQ4_1x3AVX512, 4: intQ4_1x4AVX512, 5: intQ4_1x5AVX512, 6: intQ4_1x6AVX512, 7: intQ4_1x7AVX512, 8: intQ4_1x8AVX512}
	int512Q4_Z    = intTable{1: intQ4_Zx1AVX512, 2: intQ4_Zx2AVX512, 3: intQ4_Zx3AVX512, 4: intQ4_Zx4AVX512, 5: intQ4_Zx5AVX512, 6: intQ4_Zx6AVX512, 7: intQ4_Zx7AVX512, 8: intQ4_Zx8AVX512}
	int512Q4_Z128 = intTable{1: intQ4_Z128x1AVX512, 2: intQ4_Z128x2AVX512, 3: intQ4_Z128x3AVX512, 4: intQ4_Z128x4AVX512, 5: intQ4_Z128x5AVX512, 6: intQ4_Z128x6AVX512, 7: intQ4_Z128x7AVX512, 8: intQ4_Z128x8AVX512}
	int512Q5_0    = intTable{1: intQ5_0x1AVX512, 2: intQ5_0x2AVX512, 3: intQ5_0x3AVX512, 4: intQ5_0x4AVX512, 5: intQ5_0x5AVX512, 6: intQ5_0x6AVX512, 7: intQ5_0x7AVX512, 8: intQ5_0x8AVX512}
	int512Q5_1    = intTable{1: intQ5_1x1AVX512, 2: intQ5_1x2AVX512, 3: intQ5_1x3AVX512, 4: intQ5_1x4AVX512, 5: intQ5_1x5AVX512, 6: intQ5_1x6AVX512, 7: intQ5_1x7AVX512, 8: intQ5_1x8AVX512}
	int512Q4_K    = intTable{1: intQ4_Kx1AVX512, 2: intQ4_Kx2AVX512, 3: intQ4_Kx3AVX512, 4: intQ4_Kx4AVX512, 5: intQ4_Kx5AVX512, 6: intQ4_Kx6AVX512, 7: intQ4_Kx7AVX512, 8: intQ4_Kx8AVX512}
	int512Q5_K    = intTable{1: intQ5_Kx1AVX512, 2: intQ5_Kx2AVX512, 3: intQ5_Kx3AVX512, 4: intQ5_Kx4AVX512, 5: intQ5_Kx5AVX512, 6: intQ5_Kx6AVX512, 7: intQ5_Kx7AVX512, 8: intQ5_Kx8AVX512}
	int512Q6_K    = intTable{1: intQ6_Kx1AVX512, 2: intQ6_Kx2AVX512, 3: intQ6_Kx3AVX512, 4: intQ6_Kx4AVX512, 5: intQ6_Kx5AVX512, 6: intQ6_Kx6AVX512, 7: intQ6_Kx7AVX512, 8: intQ6_Kx8AVX512}
)

// The AVX-512 BW integer kernel tables, for AVX-512 without VNNI.
var (
	int512bwQ8_0    = intTable{1: intQ8_0x1AVX512BW, 2: intQ8_0x2AVX512BW, 3: intQ8_0x3AVX512BW, 4: intQ8_0x4AVX512BW}
	int512bwQ4_0    = intTable{1: intQ4_0x1AVX512BW, 2: intQ4_0x2AVX512BW, 3: intQ4_0x3AVX512BW, 4: intQ4_0x4AVX512BW}
	int512bwQ4_1    = intTable{1: intQ4_1x1AVX512BW, 2: intQ4_1x2AVX512BW, 3: intQ4_1x3AVX512BW, 4: intQ4_1x4AVX512BW}
	int512bwQ4_Z    = intTable{1: intQ4_Zx1AVX512BW, 2: intQ4_Zx2AVX512BW, 3: intQ4_Zx3AVX512BW, 4: intQ4_Zx4AVX512BW}
	int512bwQ4_Z128 = intTable{1: intQ4_Z128x1AVX512BW, 2: intQ4_Z128x2AVX512BW, 3: intQ4_Z128x3AVX512BW, 4: intQ4_Z128x4AVX512BW}
	int512bwQ5_0    = intTable{1: intQ5_0x1AVX512BW, 2: intQ5_0x2AVX512BW, 3: intQ5_0x3AVX512BW, 4: intQ5_0x4AVX512BW}
	int512bwQ5_1    = intTable{1: intQ5_1x1AVX512BW, 2: intQ5_1x2AVX512BW, 3: intQ5_1x3AVX512BW, 4: intQ5_1x4AVX512BW}
	int512bwQ4_K    = intTable{1: intQ4_Kx1AVX512BW, 2: intQ4_Kx2AVX512BW, 3: intQ4_Kx3AVX512BW, 4: intQ4_Kx4AVX512BW}
	int512bwQ5_K    = intTable{1: intQ5_Kx1AVX512BW, 2: intQ5_Kx2AVX512BW, 3: intQ5_Kx3AVX512BW, 4: intQ5_Kx4AVX512BW}
	int512bwQ6_K    = intTable{1: intQ6_Kx1AVX512BW, 2: intQ6_Kx2AVX512BW, 3: intQ6_Kx3AVX512BW, 4: intQ6_Kx4AVX512BW}
)

// The AVX2 integer kernel tables.
var (
	int256Q8_0    = intTable{1: intQ8_0x1AVX2, 2: intQ8_0x2AVX2, 3: intQ8_0x3AVX2, 4: intQ8_0x4AVX2}
	int256Q4_0    = intTable{1: intQ4_0x1AVX2, 2: intQ4_0x2AVX2, 3: intQ4_0x3AVX2, 4: intQ4_0x4AVX2}
	int256Q4_1    = intTable{1: intQ4_1x1AVX2, 2: intQ4_1x2AVX2, 3: intQ4_1x3AVX2, 4: intQ4_1x4AVX2}
	int256Q4_Z    = intTable{1: intQ4_Zx1AVX2, 2: intQ4_Zx2AVX2, 3: intQ4_Zx3AVX2, 4: intQ4_Zx4AVX2}
	int256Q4_Z128 = intTable{1: intQ4_Z128x1AVX2, 2: intQ4_Z128x2AVX2, 3: intQ4_Z128x3AVX2, 4: intQ4_Z128x4AVX2}
	int256Q5_0    = intTable{1: intQ5_0x1AVX2, 2: intQ5_0x2AVX2, 3: intQ5_0x3AVX2, 4: intQ5_0x4AVX2}
	int256Q5_1    = intTable{1: intQ5_1x1AVX2, 2: intQ5_1x2AVX2, 3: intQ5_1x3AVX2, 4: intQ5_1x4AVX2}
	int256Q4_K    = intTable{1: intQ4_Kx1AVX2, 2: intQ4_Kx2AVX2, 3: intQ4_Kx3AVX2, 4: intQ4_Kx4AVX2}
	int256Q5_K    = intTable{1: intQ5_Kx1AVX2, 2: intQ5_Kx2AVX2, 3: intQ5_Kx3AVX2, 4: intQ5_Kx4AVX2}
	int256Q6_K    = intTable{1: intQ6_Kx1AVX2, 2: intQ6_Kx2AVX2, 3: intQ6_Kx3AVX2, 4: intQ6_Kx4AVX2}
)

// The float kernel tables, AVX-512 and AVX2.
var (
	float512F32  = floatTable{1: floatF32x1AVX512, 2: floatF32x2AVX512, 3: floatF32x3AVX512, 4: floatF32x4AVX512, 5: floatF32x5AVX512, 6: floatF32x6AVX512, 7: floatF32x7AVX512, 8: floatF32x8AVX512}
	float512F16  = floatTable{1: floatF16x1AVX512, 2: floatF16x2AVX512, 3: floatF16x3AVX512, 4: floatF16x4AVX512, 5: floatF16x5AVX512, 6: floatF16x6AVX512, 7: floatF16x7AVX512, 8: floatF16x8AVX512}
	float512BF16 = floatTable{1: floatBF16x1AVX512, 2: floatBF16x2AVX512, 3: floatBF16x3AVX512, 4: floatBF16x4AVX512, 5: floatBF16x5AVX512, 6: floatBF16x6AVX512, 7: floatBF16x7AVX512, 8: floatBF16x8AVX512}
	float256F32  = floatTable{1: floatF32x1AVX2, 2: floatF32x2AVX2, 3: floatF32x3AVX2}
	float256F16  = floatTable{1: floatF16x1AVX2, 2: floatF16x2AVX2, 3: floatF16x3AVX2}
	float256BF16 = floatTable{1: floatBF16x1AVX2, 2: floatBF16x2AVX2, 3: floatBF16x3AVX2}
	float512F8   = floatTable{1: floatF8x1AVX512, 2: floatF8x2AVX512, 3: floatF8x3AVX512, 4: floatF8x4AVX512, 5: floatF8x5AVX512, 6: floatF8x6AVX512, 7: floatF8x7AVX512, 8: floatF8x8AVX512}
	float256F8   = floatTable{1: floatF8x1AVX2, 2: floatF8x2AVX2, 3: floatF8x3AVX2}
)

// pickFloat is pickInt for the float kernels.
func pickFloat(t dtype.DType, avx512, avx2 floatTable) floatTable {
	switch {
	case hasAVX512:
		return avx512
	case hasAVX2:
		return avx2
	}
	return goFloatGroup(t)
}

// The attention kernels, by the number of heads they take.
var (
	score512       = [9]scoreKernel{1: score1AVX512, 2: score2AVX512, 3: score3AVX512, 4: score4AVX512, 5: score5AVX512, 6: score6AVX512, 7: score7AVX512, 8: score8AVX512}
	score256       = [4]scoreKernel{1: score1AVX2, 2: score2AVX2, 3: score3AVX2}
	weightedSum256 = [5]weightedKernel{1: weightedSum1AVX2, 2: weightedSum2AVX2, 3: weightedSum3AVX2, 4: weightedSum4AVX2}
	weightedSum512 = [9]weightedKernel{1: weightedSum1AVX512, 2: weightedSum2AVX512, 3: weightedSum3AVX512, 4: weightedSum4AVX512, 5: weightedSum5AVX512, 6: weightedSum6AVX512, 7: weightedSum7AVX512, 8: weightedSum8AVX512}
)

// weightedSum is WeightedSum past its checks (v holds the cnt rows exactly): the
// kernels take up to 8 heads (AVX-512, hd a multiple of 32) or 4 (AVX2, of 16) a call.
func weightedSum(w []float32, ldw int, v []float32, cnt int, out []float32, heads, hd int) {
	var kern []weightedKernel
	switch {
	case hasAVX512 && hd%32 == 0:
		kern = weightedSum512[:]
	case hasAVX2 && hd%16 == 0:
		kern = weightedSum256[:]
	default:
		goWeightedSum(w, ldw, v, cnt, out, heads)
		return
	}
	for h := 0; h < heads; {
		b := min(len(kern)-1, heads-h)
		kern[b](&w[h*ldw], ldw, &v[0], cnt, &out[h*hd], hd)
		h += b
	}
}

// scoreBlock is ScoreBlock past its checks.
func scoreBlock(kT []float32, hd int, q []float32, g int, out []float32, ldo, cnt int) {
	switch {
	case hasAVX512:
		for h := 0; h < g; h += 8 {
			score512[min(8, g-h)](&kT[0], hd, &q[h*hd], &out[h*ldo], ldo, cnt)
		}
	case hasAVX2:
		for h := 0; h < g; h += 3 {
			score256[min(3, g-h)](&kT[0], hd, &q[h*hd], &out[h*ldo], ldo, cnt)
		}
	default:
		goScoreBlock(kT, hd, q, g, out, ldo, cnt)
	}
}

// StreamRead reads b as the product kernels read their weights and returns a checksum:
// a probe of the memory bandwidth they can reach. Only the first len(b) rounded down
// to 256 bytes are read by the assembly; the rest by Go.
func StreamRead(b []byte) uint64 {
	n := len(b) &^ 255
	var s uint64
	switch {
	case n == 0:
	case hasAVX512:
		s = streamAVX512(&b[0], n)
	case hasAVX2:
		s = streamAVX2(&b[0], n)
	default:
		n = 0
	}
	return s + goStreamRead(b[n:])
}

// quantizeRow quantises the blocks of one row of activations (see act8.go).
func quantizeRow(x []float32, block int, codes []int8, side []uint32) {
	if !hasAVX2 || len(x) == 0 {
		goQuantizeRow(x, block, codes, side)
		return
	}
	blocks := len(x) / block
	_, _ = codes[len(x)-1], side[len(side)-1] // bounds, checked once
	switch {
	case hasAVX512 && block == kBlock:
		quantize256AVX512(&x[0], blocks, &codes[0], &side[0])
	case hasAVX512 && block == z128Block:
		quantize128AVX512(&x[0], blocks, &codes[0], &side[0])
	case hasAVX512:
		quantize32AVX512(&x[0], blocks, &codes[0], &side[0])
	case block == kBlock:
		quantize256AVX2(&x[0], blocks, &codes[0], &side[0])
	case block == z128Block:
		quantize128AVX2(&x[0], blocks, &codes[0], &side[0])
	default:
		quantize32AVX2(&x[0], blocks, &codes[0], &side[0])
	}
}

// pickInt returns the kernels of type t that this machine runs best: the AVX-512 VNNI
// ones where it has the extensions, the AVX-512 BW ones, the AVX2 ones, else the
// pure-Go ones.
func pickInt(t dtype.DType, vnni, bw, avx2 intTable) intTable {
	switch {
	case hasVNNI:
		return vnni
	case hasAVX512:
		return bw
	case hasAVX2:
		return avx2
	}
	return goInt(t)
}

// The kernel tables, indexed by the number of activation rows; chosen once, at start.
var (
	floatF32  = pickFloat(dtype.F32, float512F32, float256F32)
	floatF16  = pickFloat(dtype.F16, float512F16, float256F16)
	floatBF16 = pickFloat(dtype.BF16, float512BF16, float256BF16)
	floatF8   = pickFloat(dtype.F8_E4M3_B128, float512F8, float256F8)

	intQ8_0    = pickInt(dtype.Q8_0, int512Q8_0, int512bwQ8_0, int256Q8_0)
	intQ4_0    = pickInt(dtype.Q4_0, int512Q4_0, int512bwQ4_0, int256Q4_0)
	intQ4_1    = pickInt(dtype.Q4_1, int512Q4_1, int512bwQ4_1, int256Q4_1)
	intQ4_Z    = pickInt(dtype.Q4_Z, int512Q4_Z, int512bwQ4_Z, int256Q4_Z)
	intQ4_Z128 = pickInt(dtype.Q4_Z128, int512Q4_Z128, int512bwQ4_Z128, int256Q4_Z128)
	intQ5_0    = pickInt(dtype.Q5_0, int512Q5_0, int512bwQ5_0, int256Q5_0)
	intQ5_1    = pickInt(dtype.Q5_1, int512Q5_1, int512bwQ5_1, int256Q5_1)
	intQ4_K    = pickInt(dtype.Q4_K, int512Q4_K, int512bwQ4_K, int256Q4_K)
	intQ5_K    = pickInt(dtype.Q5_K, int512Q5_K, int512bwQ5_K, int256Q5_K)
	intQ6_K    = pickInt(dtype.Q6_K, int512Q6_K, int512bwQ6_K, int256Q6_K)
)

// Name names the instruction set of the kernels in use.
func Name() string {
	switch {
	case hasVNNI:
		return "AVX-512 VNNI"
	case hasAVX512:
		return "AVX-512 BW"
	case hasAVX2:
		return "AVX2"
	}
	return "pure Go"
}
