package main

import "fmt"

// Attention's kernels (attn.go in the package): scores of up to scoreHeads query heads
// against a block of 16 keys stored dimension-major, one key per vector lane, each
// score two chains of fused multiply-adds over the even and the odd dimensions; the
// weighted sum of value rows into up to weightedHeads heads' outputs, one fused
// multiply-add per term in order of the rows; and the streaming read that measures
// the memory bandwidth.

const (
	scoreSig    = "(kT *float32, hd int, q *float32, out *float32, ldo int, cnt int)"
	weightedSig = "(w *float32, ldw int, v *float32, cnt int, out *float32, hd int)"
)

// scoreHeads is how many heads a score kernel takes: the score block is the float
// kernels' group product with the keys' dimensions for columns and the heads for
// activation rows, so as many as those take.
const scoreHeads = floatRows

// weightedHeads is how many heads a weighted-sum kernel takes: four vectors (16
// dimensions) of sums per head in 16 registers, beside four of values and one of
// weights per head.
const weightedHeads = 4

// outPtr holds head h's output pointer in the score kernels' stores.
var outPtr = [scoreHeads]string{"R6", "R9", "R10"}

// scoreKernel emits the score kernel for g heads: the group product of the 16 keys'
// hd dimensions with the g query rows, then the scores of keys j < cnt stored.
func scoreKernel(f *file, g int) {
	name := fmt.Sprintf("score%dNEON", g)
	k := f.newFn(name, scoreSig, 48, fmt.Sprintf("%s scores %d query heads against a block of 16 keys stored dimension-major.", name, g))
	k.op("MOVD kT+0(FP), R0")
	k.op("MOVD hd+8(FP), R1")
	k.op("MOVD q+16(FP), R2")
	k.op("LSL $2, R1, R3")
	rowPointers(k, g)
	groupProduct(k, floatType{"F32", 4}, g)
	k.op("MOVD out+24(FP), R6")
	k.op("MOVD ldo+32(FP), R7")
	k.op("MOVD cnt+40(FP), R8")
	k.op("LSL $2, R7")
	for h := 1; h < g; h++ {
		k.op("ADD R7, %s, %s", outPtr[h-1], outPtr[h])
	}
	k.op("CMP $16, R8")
	k.op("BLT part")
	for h := range g {
		k.op("VST1 [V%d.S4, V%d.S4, V%d.S4, V%d.S4], (%s)", acc(0, h, 0), acc(0, h, 1), acc(0, h, 2), acc(0, h, 3), outPtr[h])
	}
	k.op("RET")
	partialScores(k, g)
}

// partialScores emits the stores of a block cut short: lane by lane, j < cnt (R8),
// each head's score of key j, so that nothing past cnt is written (nor read).
func partialScores(k *fn, g int) {
	k.label("part")
	for j := range 16 {
		k.op("CMP $%d, R8", j)
		k.op("BLE done")
		for h := range g {
			k.op("VMOV V%d.S[%d], R11", acc(0, h, j/4), j%4)
			k.op("MOVW R11, %d(%s)", 4*j, outPtr[h])
		}
	}
	k.label("done")
}

// The weighted sum's registers: V0–V3 16 dimensions of a value row, V4+h head h's
// weight of it, wacc(h, v) head h's sums; R10+h head h's weights.

// wacc is head h's sums of dimensions 4v…4v+3 of the current 16.
func wacc(h, v int) V { return V(8 + 4*h + v) }

// weightedSumKernel emits the weighted sum for H heads, 16 dimensions of every head
// at a time (hd a multiple of 16): the heads' outputs loaded, then for each value row
// in order, its 16 values times each head's weight added, one FMLA each, then stored.
func weightedSumKernel(f *file, H int) {
	name := fmt.Sprintf("weightedSum%dNEON", H)
	k := f.newFn(name, weightedSig, 48, fmt.Sprintf("%s adds, for each of %d heads, the weighted sum of cnt value rows to its output, in order.", name, H))
	k.op("MOVD w+0(FP), R10")
	k.op("MOVD ldw+8(FP), R1")
	k.op("LSL $2, R1")
	for h := 1; h < H; h++ {
		k.op("ADD R1, R%d, R%d", 9+h, 10+h)
	}
	k.op("MOVD v+16(FP), R2")
	k.op("MOVD cnt+24(FP), R3")
	k.op("MOVD out+32(FP), R4")
	k.op("MOVD hd+40(FP), R5")
	k.op("LSL $2, R5")      // a row's bytes
	k.op("LSL $2, R3, R14") // the weights' bytes per head
	k.op("MOVD $0, R6")     // the dimensions done, in bytes
	k.label("dims")
	k.op("CMP R5, R6")
	k.op("BGE done")
	headSums(k, H, "VLD1 (R7), [V%d.S4, V%d.S4, V%d.S4, V%d.S4]")
	k.op("ADD R6, R2, R8")
	k.op("MOVD R3, R9")
	k.label("rows")
	k.op("CBZ R9, store")
	k.op("VLD1 (R8), [V0.S4, V1.S4, V2.S4, V3.S4]")
	k.op("ADD R5, R8")
	for h := range H {
		k.op("FMOVS.P 4(R%d), F%d", 10+h, 4+h)
	}
	for h := range H {
		for v := range 4 {
			k.i(fmlaElem(wacc(h, v), V(v), V(4+h), 0))
		}
	}
	k.op("SUB $1, R9")
	k.op("B rows")
	k.label("store")
	for h := range H {
		k.op("SUB R14, R%d", 10+h) // back to the heads' first weights
	}
	headSums(k, H, "VST1 [V%d.S4, V%d.S4, V%d.S4, V%d.S4], (R7)")
	k.op("ADD $64, R6")
	k.op("B dims")
	k.label("done")
}

// headSums emits form, a load or store of the H heads' sums, at each head's output
// (out + R6 + h·hd·4, through R7).
func headSums(k *fn, H int, form string) {
	k.op("ADD R6, R4, R7")
	for h := range H {
		k.op(form, wacc(h, 0), wacc(h, 1), wacc(h, 2), wacc(h, 3))
		if h+1 < H {
			k.op("ADD R5, R7")
		}
	}
}

// streamKernel emits a streaming read of n bytes (a multiple of 256) at p, with the
// vector loads the product kernels read their weights with, returning the sum of its
// 8-byte little-endian words as goStreamRead sums them (modulo 2⁶⁴): a measure of the
// memory bandwidth the kernels can reach. Eight sums keep the adds off the loads' path.
func streamKernel(f *file) {
	k := f.newFn("streamNEON", "(p *byte, n int) uint64", 24, "streamNEON reads n bytes (a multiple of 256) at p as the product kernels read weights, and returns a checksum of them.")
	k.op("MOVD p+0(FP), R0")
	k.op("MOVD n+8(FP), R1")
	k.op("LSR $8, R1")
	for s := V(16); s < 24; s++ {
		k.i(eor(s, s, s))
	}
	k.label("loop")
	k.op("CBZ R1, sum")
	for r := V(0); r < 16; r += 4 {
		k.op("VLD1.P 64(R0), [V%d.D2, V%d.D2, V%d.D2, V%d.D2]", r, r+1, r+2, r+3)
	}
	for r := V(0); r < 16; r++ {
		k.i(add("2d", 16+r%8, 16+r%8, r))
	}
	k.op("SUB $1, R1")
	k.op("B loop")
	k.label("sum")
	for step := V(4); step > 0; step /= 2 {
		for s := V(16); s < 16+step; s++ {
			k.i(add("2d", s, s, s+step))
		}
	}
	k.op("VMOV V16.D[0], R2")
	k.op("VMOV V16.D[1], R3")
	k.op("ADD R3, R2")
	k.op("MOVD R2, ret+16(FP)")
}

// attnKernels writes the attention kernels and the streaming read.
func attnKernels(f *file) {
	for g := 1; g <= scoreHeads; g++ {
		scoreKernel(f, g)
	}
	for h := 1; h <= weightedHeads; h++ {
		weightedSumKernel(f, h)
	}
	streamKernel(f)
}
