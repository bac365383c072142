package main

import "fmt"

// The A64 encodings of the vector instructions the kernels use. Go's arm64 assembler
// has mnemonics for few of them, so every vector instruction is written as a WORD with
// the instruction in GNU syntax beside it; kernels' TestArm64Encodings assembles those
// comments with llvm-mc and checks the words. Loads, stores, branches and integer
// arithmetic on general registers are left to Go's assembler.

// V is a vector register, V0…V31.
type V int

// arr is a vector arrangement, as written after a register: "16b", "8h", "4s", "4h"….
type arr string

// sizeQ returns the size field and Q bit of an arrangement.
func (a arr) sizeQ() (size, q uint32) {
	switch a {
	case "8b":
		return 0, 0
	case "16b":
		return 0, 1
	case "4h":
		return 1, 0
	case "8h":
		return 1, 1
	case "2s":
		return 2, 0
	case "4s":
		return 2, 1
	case "2d":
		return 3, 1
	}
	panic("arrangement " + string(a))
}

// in writes r with arrangement a, as GNU syntax does: v3.16b.
func (r V) in(a arr) string { return fmt.Sprintf("v%d.%s", int(r), a) }

// inst is one encoded instruction and its text.
type inst struct {
	word uint32
	text string
}

// threeSame encodes the "three registers of the same type" group.
func threeSame(name string, u, opcode uint32, a arr, d, n, m V) inst {
	size, q := a.sizeQ()
	w := q<<30 | u<<29 | 0b01110<<24 | size<<22 | 1<<21 | uint32(m)<<16 | opcode<<11 | 1<<10 | uint32(n)<<5 | uint32(d)
	return inst{w, fmt.Sprintf("%s %s, %s, %s", name, d.in(a), n.in(a), m.in(a))}
}

// logic encodes AND, ORR, EOR, BIC, BSL, BIT (the size field chooses among them).
func logic(name string, u, size uint32, d, n, m V) inst {
	w := 1<<30 | u<<29 | 0b01110<<24 | size<<22 | 1<<21 | uint32(m)<<16 | 0b00011<<11 | 1<<10 | uint32(n)<<5 | uint32(d)
	return inst{w, fmt.Sprintf("%s %s, %s, %s", name, d.in("16b"), n.in("16b"), m.in("16b"))}
}

// floatSame encodes the single-precision three-same instructions (4s).
func floatSame(name string, u, hi, opcode uint32, d, n, m V) inst {
	w := 1<<30 | u<<29 | 0b01110<<24 | hi<<23 | 1<<21 | uint32(m)<<16 | opcode<<11 | 1<<10 | uint32(n)<<5 | uint32(d)
	return inst{w, fmt.Sprintf("%s %s, %s, %s", name, d.in("4s"), n.in("4s"), m.in("4s"))}
}

// misc encodes the "two registers, miscellaneous" group; size is the field as encoded.
func misc(u, size, q, opcode uint32, d, n V, text string) inst {
	w := q<<30 | u<<29 | 0b01110<<24 | size<<22 | 0b10000<<17 | opcode<<12 | 0b10<<10 | uint32(n)<<5 | uint32(d)
	return inst{w, text}
}

// long encodes the "three registers of different types" group (SMULL, SMLAL…): the
// sources' arrangement is 8b/16b/4h/8h, the destination's twice as wide.
func long(name string, u, opcode uint32, src arr, d, n, m V) inst {
	size, q := src.sizeQ()
	wide := map[uint32]arr{0: "8h", 1: "4s", 2: "2d"}[size]
	if q == 1 {
		name += "2"
	}
	w := q<<30 | u<<29 | 0b01110<<24 | size<<22 | 1<<21 | uint32(m)<<16 | opcode<<12 | uint32(n)<<5 | uint32(d)
	return inst{w, fmt.Sprintf("%s %s, %s, %s", name, d.in(wide), n.in(src), m.in(src))}
}

// byElem32 encodes the "vector × element" group for 32-bit elements (index 0…3):
// name d.4s, n.<na>, m.<ma>[i].
func byElem32(name string, u, opcode uint32, na, ma arr, d, n, m V, i int) inst {
	h, l := uint32(i>>1&1), uint32(i&1)
	w := 1<<30 | u<<29 | 0b01111<<24 | 2<<22 | l<<21 | uint32(m)<<16 | opcode<<12 | h<<11 | uint32(n)<<5 | uint32(d)
	return inst{w, fmt.Sprintf("%s %s, %s, v%d.%s[%d]", name, d.in("4s"), n.in(na), int(m), ma, i)}
}

// shiftImm encodes the "shift by immediate" group; immhb is immh:immb as encoded.
func shiftImm(u, q, immhb, opcode uint32, d, n V, text string) inst {
	w := q<<30 | u<<29 | 0b011110<<23 | immhb<<16 | opcode<<11 | 1<<10 | uint32(n)<<5 | uint32(d)
	return inst{w, text}
}

// permute encodes UZP1, TRN1, ZIP1, UZP2, TRN2, ZIP2 (opcode 1, 2, 3, 5, 6, 7).
func permute(name string, opcode uint32, a arr, d, n, m V) inst {
	size, q := a.sizeQ()
	w := q<<30 | 0b01110<<24 | size<<22 | uint32(m)<<16 | opcode<<12 | 0b10<<10 | uint32(n)<<5 | uint32(d)
	return inst{w, fmt.Sprintf("%s %s, %s, %s", name, d.in(a), n.in(a), m.in(a))}
}

// The instructions. Integer.

func add(a arr, d, n, m V) inst  { return threeSame("add", 0, 0b10000, a, d, n, m) }
func mla(a arr, d, n, m V) inst  { return threeSame("mla", 0, 0b10010, a, d, n, m) }
func addp(a arr, d, n, m V) inst { return threeSame("addp", 0, 0b10111, a, d, n, m) }
func smax(a arr, d, n, m V) inst { return threeSame("smax", 0, 0b01100, a, d, n, m) }

// cmtst sets each element whose AND of n and m is not zero to all ones.
func cmtst(a arr, d, n, m V) inst { return threeSame("cmtst", 0, 0b10001, a, d, n, m) }

func and(d, n, m V) inst { return logic("and", 0, 0, d, n, m) }
func eor(d, n, m V) inst { return logic("eor", 1, 0, d, n, m) }

// bit inserts the bits of n where m has ones into d: d = d&^m | n&m.
func bit(d, n, m V) inst { return logic("bit", 1, 2, d, n, m) }

// sdot: d.4s[i] += Σ_k n.16b[4i+k]·m.16b[4·lane+k], signed bytes (ARMv8.2 dot product).
func sdot(d, n, m V, lane int) inst { return byElem32("sdot", 0, 0b1110, "16b", "4b", d, n, m, lane) }

// smmla: the 2×2 int32 matrix d += n·mᵀ, n and m each two rows of 8 signed bytes
// (ARMv8.6 int8 matrix multiply).
func smmla(d, n, m V) inst {
	w := uint32(0x4e80a400) | uint32(m)<<16 | uint32(n)<<5 | uint32(d)
	return inst{w, fmt.Sprintf("smmla %s, %s, %s", d.in("4s"), n.in("16b"), m.in("16b"))}
}

// mlaElem adds to the 32-bit lanes of d those of n times lane i of m.
func mlaElem(d, n, m V, i int) inst { return byElem32("mla", 1, 0b0000, "4s", "s", d, n, m, i) }

// smull and smlal widen: src 8b/4h (low halves) or 16b/8h (high halves, smull2…).
func smull(src arr, d, n, m V) inst { return long("smull", 0, 0b1100, src, d, n, m) }
func smlal(src arr, d, n, m V) inst { return long("smlal", 0, 0b1000, src, d, n, m) }

// saddlp and sadalp add adjacent pairs of the source (8h or 16b) into elements twice
// as wide (sadalp accumulating).
func saddlp(src arr, d, n V) inst { return pairwise("saddlp", 0b00010, src, d, n) }
func sadalp(src arr, d, n V) inst { return pairwise("sadalp", 0b00110, src, d, n) }

// pairwise encodes saddlp and sadalp.
func pairwise(name string, opcode uint32, src arr, d, n V) inst {
	size, q := src.sizeQ()
	wide := map[arr]arr{"16b": "8h", "8h": "4s", "8b": "4h", "4h": "2s"}[src]
	return misc(0, size, q, opcode, d, n, fmt.Sprintf("%s %s, %s", name, d.in(wide), n.in(src)))
}

// sqxtn narrows the 8h (or 4s) elements of n into the low half of d (8b or 4h),
// saturating.
func sqxtn(src arr, d, n V) inst { return narrow("sqxtn", 0b10100, src, d, n) }

// narrow encodes the narrowing moves.
func narrow(name string, opcode uint32, src arr, d, n V) inst {
	size, _ := src.sizeQ()
	to := map[arr]arr{"8h": "8b", "4s": "4h", "2d": "2s"}[src]
	return misc(0, size-1, 0, opcode, d, n, fmt.Sprintf("%s %s, %s", name, d.in(to), n.in(src)))
}

// ushr and shl shift each element right (unsigned) or left by an immediate.
func ushr(a arr, d, n V, s int) inst { return shiftRight("ushr", 1, a, d, n, s) }

// shiftRight encodes the right shifts by an immediate.
func shiftRight(name string, u uint32, a arr, d, n V, s int) inst {
	size, q := a.sizeQ()
	esize := uint32(8) << size
	return shiftImm(u, q, 2*esize-uint32(s), 0, d, n, fmt.Sprintf("%s %s, %s, #%d", name, d.in(a), n.in(a), s))
}

func shl(a arr, d, n V, s int) inst {
	size, q := a.sizeQ()
	esize := uint32(8) << size
	return shiftImm(0, q, esize+uint32(s), 0b01010, d, n, fmt.Sprintf("shl %s, %s, #%d", d.in(a), n.in(a), s))
}

// sxtl and uxtl widen the low (8b, 4h) or high (16b, 8h: sxtl2, uxtl2) half of n.
func sxtl(src arr, d, n V) inst { return extend("sxtl", 0, src, d, n) }
func uxtl(src arr, d, n V) inst { return extend("uxtl", 1, src, d, n) }

// extend encodes sxtl and uxtl (sshll and ushll by 0).
func extend(name string, u uint32, src arr, d, n V) inst {
	size, q := src.sizeQ()
	wide := map[uint32]arr{0: "8h", 1: "4s", 2: "2d"}[size]
	if q == 1 {
		name += "2"
	}
	return shiftImm(u, q, uint32(8)<<size, 0b10100, d, n, fmt.Sprintf("%s %s, %s", name, d.in(wide), n.in(src)))
}

// dupElem copies lane i of n (of the given element size: b, h, s) to every lane of d.
func dupElem(a arr, d, n V, i int) inst {
	size, q := a.sizeQ()
	imm5 := uint32(1)<<size | uint32(i)<<(size+1)
	w := q<<30 | 0b01110000<<21 | imm5<<16 | 1<<10 | uint32(n)<<5 | uint32(d)
	el := map[uint32]string{0: "b", 1: "h", 2: "s", 3: "d"}[size]
	return inst{w, fmt.Sprintf("dup %s, v%d.%s[%d]", d.in(a), int(n), el, i)}
}

// tbl: d.16b[i] = the byte of table n (one register) at index m.16b[i], 0 past 15.
func tbl(d, n, m V) inst {
	w := uint32(0x4e000000) | uint32(m)<<16 | uint32(n)<<5 | uint32(d)
	return inst{w, fmt.Sprintf("tbl %s, {%s}, %s", d.in("16b"), n.in("16b"), m.in("16b"))}
}

// uzp1/uzp2 take the even/odd elements of n and m; zip1/zip2 interleave their low/high
// halves.
func uzp1(a arr, d, n, m V) inst { return permute("uzp1", 1, a, d, n, m) }
func uzp2(a arr, d, n, m V) inst { return permute("uzp2", 5, a, d, n, m) }
func zip1(a arr, d, n, m V) inst { return permute("zip1", 3, a, d, n, m) }
func zip2(a arr, d, n, m V) inst { return permute("zip2", 7, a, d, n, m) }

// Floating point, single precision, four lanes.

func fadd(d, n, m V) inst { return floatSame("fadd", 0, 0, 0b11010, d, n, m) }
func fsub(d, n, m V) inst { return floatSame("fsub", 0, 1, 0b11010, d, n, m) }
func fmul(d, n, m V) inst { return floatSame("fmul", 1, 0, 0b11011, d, n, m) }
func fmax(d, n, m V) inst { return floatSame("fmax", 0, 0, 0b11110, d, n, m) }

// fmulElem multiplies by lane i of m; fmlaElem is the fused multiply-add d += n·m[i],
// one rounding.
func fmulElem(d, n, m V, i int) inst { return byElem32("fmul", 0, 0b1001, "4s", "s", d, n, m, i) }
func fmlaElem(d, n, m V, i int) inst { return byElem32("fmla", 0, 0b0001, "4s", "s", d, n, m, i) }

// scvtf converts int32 lanes to float32, rounding to nearest even.
func scvtf(d, n V) inst {
	return misc(0, 0, 1, 0b11101, d, n, fmt.Sprintf("scvtf %s, %s", d.in("4s"), n.in("4s")))
}

// fcvtns converts float32 lanes to int32, rounding to nearest with ties to even
// (NaN to 0, saturating).
func fcvtns(d, n V) inst {
	return misc(0, 0, 1, 0b11010, d, n, fmt.Sprintf("fcvtns %s, %s", d.in("4s"), n.in("4s")))
}

func fabs(d, n V) inst {
	return misc(0, 2, 1, 0b01111, d, n, fmt.Sprintf("fabs %s, %s", d.in("4s"), n.in("4s")))
}

// fcvtl widens the four float16 values in the low half of n (fcvtl2: the high half)
// to float32, exactly.
func fcvtl(d, n V, high bool) inst {
	q, name, src := uint32(0), "fcvtl", arr("4h")
	if high {
		q, name, src = 1, "fcvtl2", "8h"
	}
	return misc(0, 0, q, 0b10111, d, n, fmt.Sprintf("%s %s, %s", name, d.in("4s"), n.in(src)))
}

// fmaxv is the largest lane of n, in s<d>.
func fmaxv(d, n V) inst {
	w := uint32(0x6e30f800) | uint32(n)<<5 | uint32(d)
	return inst{w, fmt.Sprintf("fmaxv s%d, %s", int(d), n.in("4s"))}
}

// shll widens the 16-bit elements of n's low half (shll, 4h) or high half (shll2, 8h)
// to 32 bits shifted left by 16: each bfloat16 becomes the float32 it stands for.
func shll(d, n V, high bool) inst {
	q, name, src := uint32(0), "shll", arr("4h")
	if high {
		q, name, src = 1, "shll2", "8h"
	}
	return misc(1, 1, q, 0b10011, d, n, fmt.Sprintf("%s %s, %s, #16", name, d.in("4s"), n.in(src)))
}

// sqxtn2 narrows the 8h (or 4s) elements of n into the high half of d (16b or 8h),
// saturating, and keeps d's low half: after sqxtn, it completes a full register.
func sqxtn2(src arr, d, n V) inst {
	size, _ := src.sizeQ()
	to := map[arr]arr{"8h": "16b", "4s": "8h", "2d": "4s"}[src]
	return misc(0, size-1, 1, 0b10100, d, n, fmt.Sprintf("sqxtn2 %s, %s", d.in(to), n.in(src)))
}

// neg negates each element of n (wrapping).
func neg(a arr, d, n V) inst {
	size, q := a.sizeQ()
	return misc(1, size, q, 0b01011, d, n, fmt.Sprintf("neg %s, %s", d.in(a), n.in(a)))
}

// saddlv sums the signed 16-bit lanes of n.8h into the 32-bit scalar s<d>, exactly.
func saddlv(d, n V) inst {
	w := uint32(1)<<30 | 0b01110<<24 | 1<<22 | 0b11000<<17 | 0b00011<<12 | 0b10<<10 | uint32(n)<<5 | uint32(d)
	return inst{w, fmt.Sprintf("saddlv s%d, %s", int(d), n.in("8h"))}
}

// movi16b sets every byte of d to imm.
func movi16b(d V, imm uint8) inst {
	abc, defgh := uint32(imm>>5), uint32(imm&31)
	w := uint32(0x4f00e400) | abc<<16 | defgh<<5 | uint32(d)
	return inst{w, fmt.Sprintf("movi %s, #0x%x", d.in("16b"), imm)}
}

// sshll widens the low (8b, 4h) or high (16b, 8h: sshll2) half of n, signed, and
// shifts each element left by s (less than the source element's bits).
func sshll(src arr, d, n V, s int) inst {
	size, q := src.sizeQ()
	wide := map[uint32]arr{0: "8h", 1: "4s", 2: "2d"}[size]
	name := "sshll"
	if q == 1 {
		name += "2"
	}
	return shiftImm(0, q, uint32(8)<<size+uint32(s), 0b10100, d, n, fmt.Sprintf("%s %s, %s, #%d", name, d.in(wide), n.in(src), s))
}
