package main

import "fmt"

// The activation quantizers, NEON: quantizeBlock of act8.go for a run of blocks of 32
// or 256 values, to the bit. Per block the largest magnitude (FABS, FMAX, FMAXV), the
// scalar float32 divisions d = max/127 and id = min(127/max, MaxFloat32) (both 0
// unless max > 0, as in Go), codes from the float32 products x·id rounded to nearest
// even (FCVTNS) and clamped to ±127 by saturating narrows and one SMAX, then the
// exact integer sums of the side data. NEON's conversions saturate and take NaN to 0,
// as Go's arm64 conversion does.
//
// Registers, both kernels: R0 x, R1 blocks left, R2 codes, R3 side; V16 max, V17 the
// constant 127.0, V18 d, V19 id, V20 0.0, V30 the largest float32, V31 bytes of −127.

// The fixed vector registers of the quantizers.
const (
	qAmax V = 16 // the block's largest magnitude, in lane 0
	q127  V = 17 // 127.0 in lane 0
	qD    V = 18 // d = max/127, in lane 0
	qID   V = 19 // id = 127/max, in lane 0
	qZero V = 20 // 0.0 in lane 0
	qFMax V = 30 // the largest float32 in lane 0: the cap of id
	qMin8 V = 31 // −127 in every byte: the lower clamp of the codes
)

// The quantizers' signature, and the layout of the side data (act8.go).
const (
	qSig       = "(x *float32, blocks int, codes *int8, side *uint32)"
	qArgs      = 32
	qF127      = 0x42fe0000 // float32 bits of 127
	qShiftSub  = 5          // −32·Σq is (−Σq)<<5
	qSide32    = 4 * 8      // bytes of side data per 32-value block
	qSide256   = 4 * 32     // bytes per 256-value block
	qNegOffset = 4 * 21     // byte offset of a 256-value block's −Σq pairs
)

// quantKernels writes the quant kernels: quantize32NEON and quantize256NEON.
func quantKernels(f *file) {
	quant32(f)
	quant256(f)
}

// quantFn starts a quantizer of blocks of size values: it loads the arguments and the
// constants, and opens the loop over the blocks (closed by quantLoopEnd).
func quantFn(f *file, size int) *fn {
	name := fmt.Sprintf("quantize%dNEON", size)
	g := f.newFn(name, qSig, qArgs, fmt.Sprintf("%s quantises blocks of %d activations to 8-bit codes and their side data, as quantizeBlock does.", name, size))
	g.op("MOVD x+0(FP), R0")
	g.op("MOVD blocks+8(FP), R1")
	g.op("MOVD codes+16(FP), R2")
	g.op("MOVD side+24(FP), R3")
	g.op("MOVW $0x%x, R4", qF127)
	g.op("FMOVS R4, F%d", q127)
	g.op("MOVW $0x7f7fffff, R4")
	g.op("FMOVS R4, F%d", qFMax)
	g.op("FMOVS ZR, F%d", qZero)
	g.i(movi16b(qMin8, 0x81))
	g.op("CMP $0, R1")
	g.op("BLE done")
	g.label("loop")
	return g
}

// quantLoopEnd closes the loop over the blocks.
func quantLoopEnd(g *fn) {
	g.op("SUBS $1, R1, R1")
	g.op("BNE loop")
	g.label("done")
}

// load4 loads 16 floats at R (post-incremented) into V(first)…V(first+3).
func load4(g *fn, r string, first V) {
	g.op("VLD1.P 64(%s), [V%d.S4, V%d.S4, V%d.S4, V%d.S4]", r, first, first+1, first+2, first+3)
}

// maxTree folds the n (a power of 2) vectors from V(first) into V(first) by FMAX,
// pairwise, so that the chains stay short.
func maxTree(g *fn, first V, n int) {
	for step := 1; step < n; step *= 2 {
		for k := 0; k < n; k += 2 * step {
			g.i(fmax(first+V(k), first+V(k), first+V(k+step)))
		}
	}
}

// scales sets d = max/127 and id = min(127/max, MaxFloat32) from the largest
// magnitude in qAmax, one float32 division each as Go's, and both to 0 unless max > 0
// (a block of zeros; a NaN), as quantizeBlock's test does.
func scales(g *fn) {
	g.op("FDIVS F%d, F%d, F%d", q127, qAmax, qD)
	g.op("FDIVS F%d, F%d, F%d", qAmax, q127, qID)
	g.op("FMINS F%d, F%d, F%d", qFMax, qID, qID)
	g.op("FCMPS $(0.0), F%d", qAmax)
	g.op("FCSELS GT, F%d, F%d, F%d", qD, qZero, qD)
	g.op("FCSELS GT, F%d, F%d, F%d", qID, qZero, qID)
}

// codes32 turns the 32 floats in V(in)…V(in+7) into their codes, 16 bytes in each of
// out0 and out1 (out0 = V(in) and out1 = V(in+1) may be reused): the float32 product
// by id, rounded to nearest even and saturated to int32 (FCVTNS), narrowed with
// saturation to 16 and then 8 bits, which clamps to [−128, 127], and raised to −127.
func codes32(g *fn, in, out0, out1 V) {
	for k := range V(8) {
		g.i(fmulElem(in+k, in+k, qID, 0))
	}
	for k := range V(8) {
		g.i(fcvtns(in+k, in+k))
	}
	for k := V(0); k < 8; k += 2 {
		g.i(sqxtn("4s", in+k, in+k))
		g.i(sqxtn2("4s", in+k, in+k+1))
	}
	g.i(sqxtn("8h", out0, in))
	g.i(sqxtn2("8h", out0, in+2))
	g.i(sqxtn("8h", out1, in+4))
	g.i(sqxtn2("8h", out1, in+6))
	g.i(smax("16b", out0, out0, qMin8))
	g.i(smax("16b", out1, out1, qMin8))
}

// quant32 writes quantize32NEON. Per block: two loads, the largest magnitude, the
// scales, the codes, their sum Σq (SADDLP, SADALP, SADDLV), and the side data from
// general registers: d, −8Σq, −16Σq, −128Σq, d·float32(Σq) (one FMULS), three zeros.
func quant32(f *file) {
	g := quantFn(f, 32)
	load4(g, "R0", 0)
	load4(g, "R0", 4)
	for k := range V(8) {
		g.i(fabs(8+k, k))
	}
	maxTree(g, 8, 8)
	g.i(fmaxv(qAmax, 8))
	scales(g)
	codes32(g, 0, 0, 1)
	g.op("VST1.P [V0.B16, V1.B16], 32(R2)")
	g.i(saddlp("16b", 2, 0))
	g.i(sadalp("16b", 2, 1))
	g.i(saddlv(2, 2))
	g.op("VMOV V2.S[0], R5")
	side32(g)
	quantLoopEnd(g)
}

// side32 writes a 32-value block's side data from Σq in R5 (32 bits; the words are
// the low halves of 64-bit arithmetic) and d in qD, and steps R3 past it.
func side32(g *fn) {
	for k, sh := range []int{3, 4, 7} {
		r := 6 + k
		g.op("LSL $%d, R5, R%d", sh, r)
		g.op("NEG R%d, R%d", r, r)
		g.op("MOVW R%d, %d(R3)", r, 4*(1+k))
	}
	g.op("SCVTFWS R5, F3")
	g.op("FMULS F%d, F3, F3", qD)
	g.op("FMOVS F%d, (R3)", qD)
	g.op("FMOVS F3, 16(R3)")
	g.op("NEG R5, R9")
	g.op("MOVW R9, 20(R3)") // −Σq
	g.op("MOVD ZR, 24(R3)")
	g.op("ADD $%d, R3", qSide32)
}

// quant256 writes quantize256NEON. Per block: a first pass over the 256 floats for
// the largest magnitude, the scales, then a second pass of eight sub-blocks of 32
// for the codes, keeping the sums of four codes of each group of 16 (sums256), and
// the side data from those (side256).
func quant256(f *file) {
	g := quantFn(f, 256)
	amax256(g)
	scales(g)
	for j := range V(8) {
		load4(g, "R0", 0)
		load4(g, "R0", 4)
		codes32(g, 0, 0, 1)
		g.op("VST1.P [V0.B16, V1.B16], 32(R2)")
		// Sums of pairs of codes, then of fours: groups 2j and 2j+1 in V(8+j).
		g.i(saddlp("16b", 2, 0))
		g.i(saddlp("16b", 3, 1))
		g.i(addp("8h", 8+j, 2, 3))
	}
	side256(g)
	quantLoopEnd(g)
}

// amax256 leaves the largest magnitude of the block at R0 in qAmax, reading it through
// R5: loads alternate between V0–V3 and V12–V15, folded into eight accumulators V4–V11
// so that no chain of FMAX is longer than eight.
func amax256(g *fn) {
	g.op("MOVD R0, R5")
	for k := range 16 {
		in, acc := V(0), V(4)
		if k%2 == 1 {
			in, acc = 12, 8
		}
		load4(g, "R5", in)
		for l := range V(4) {
			if k < 2 {
				g.i(fabs(acc+l, in+l))
				continue
			}
			g.i(fabs(in+l, in+l))
			g.i(fmax(acc+l, acc+l, in+l))
		}
	}
	maxTree(g, 4, 8)
	g.i(fmaxv(qAmax, 4))
}

// side256 writes a 256-value block's side data from the sums of fours in V8–V15 and
// d in qD, and steps R3 past it. ADDP folds them (the lanes stay in order) to G0, G1:
// Σq of groups 0–7 and 8–15 as int16 (|Σq| ≤ 16·127); ADDP of G0 and G1 is Σq of the
// eight sub-blocks as int16, words 1–4 as stored; NEG gives −Σq, words 21–28 as
// stored, and SSHLL by 5 widens those to the int32 −32·Σq of words 5–20.
func side256(g *fn) {
	for k := range V(4) {
		g.i(addp("8h", 21+k, 8+2*k, 9+2*k))
	}
	g.i(addp("8h", 25, 21, 22)) // G0
	g.i(addp("8h", 26, 23, 24)) // G1
	g.i(addp("8h", 27, 25, 26)) // sub-block sums
	g.i(neg("8h", 28, 25))
	g.i(neg("8h", 29, 26))
	for k := range V(2) {
		g.i(sshll("4h", 21+2*k, 28+k, qShiftSub))
		g.i(sshll("8h", 22+2*k, 28+k, qShiftSub))
	}
	g.op("FMOVS F%d, (R3)", qD)
	g.op("FMOVQ F27, 4(R3)")
	for k := range 4 {
		g.op("FMOVQ F%d, %d(R3)", 21+k, 20+16*k)
	}
	g.op("FMOVQ F28, %d(R3)", qNegOffset)
	g.op("FMOVQ F29, %d(R3)", qNegOffset+16)
	g.op("MOVW ZR, 116(R3)")
	g.op("MOVD ZR, 120(R3)")
	g.op("ADD $%d, R3", qSide256)
}
