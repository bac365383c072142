package main

import (
	"errors"
	"fmt"
)

// The integer kernels: products of repacked quantised weights (../repack.go) with
// 8-bit activations (../act8.go), the arithmetic of the pure-Go twins in
// ../intdot_generic.go. A 16-byte vector holds four codes of each of four rows of a
// group (a quarter), so the group is taken a quarter at a time, block by block: the
// quarter's codes, unpacked to a byte each, meet four activation codes of a row at a
// time, which SDOT takes as a lane of a register — one instruction sums 4 codes × 4
// rows exactly into int32. Without the dot product (the NEON floor), SMULL widens
// byte products to 16 bits and SADALP adds their pairs into two int32 accumulators,
// whose pairs one ADDP adds at the end of the block: the same sums. Each lane is one
// row's sum from start to end, and the float32 operations after the sums are the
// twin's, in its order, none fused, so the kernels give the twin's bits.

// intSig is the Go signature of an integer kernel (intKernel) and intArgs its bytes.
const (
	intSig  = "(w *byte, blocks int, x *int8, xstride int, side *uint32, sstride int, out *float32, ldo int)"
	intArgs = 64
	// intRows is the most activation rows an integer kernel takes: the general
	// registers hold a code, side and output pointer per row.
	intRows = 4
)

// level is a family of integer kernels: how four codes meet four activations.
type level struct {
	name string // the kernels' name suffix
	dot  bool   // SDOT; else SMULL and SADALP
}

var (
	levelDot  = level{"Dot", true}
	levelNEON = level{"NEON", false}
)

// errNoRegs is raised (as a panic inside the generator) when a kernel does not fit
// in the vector registers; intKernels then ends that table.
var errNoRegs = errors.New("out of vector registers")

// pool hands out vector registers.
type pool struct{ free []V }

// newPool returns a pool of all 32 registers; V0 is handed out first.
func newPool() *pool {
	p := &pool{}
	for v := V(31); v >= 0; v-- {
		p.free = append(p.free, v)
	}
	return p
}

// get takes a register, panicking with errNoRegs when none is left.
func (p *pool) get() V {
	if len(p.free) == 0 {
		panic(errNoRegs)
	}
	v := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	return v
}

// put returns registers to the pool; negative ones (never taken) are skipped.
func (p *pool) put(vs ...V) {
	for _, v := range vs {
		if v >= 0 {
			p.free = append(p.free, v)
		}
	}
}

// The constant table of the integer kernels, at intConsts: bytes 0x0f, bytes 0x10,
// the bit of each byte lane within its byte (1 << lane%8), bytes 0x30, then per
// quarter q the TBL
// indices that spread the mask bytes of the quarter's rows over its lanes (lane
// 4r+k needs bit 4r+k of the 16 mask bits of rows 4q…4q+3: byte 2q + lane/8), for the
// first and the second 8-byte mask.
const (
	cLow4   = 0
	cBit4   = 16
	cLaneBt = 32
	cBits45 = 48
	cIdx    = 64 // + 32q, + 16 for the second mask
)

// intConstTable is the bytes of the constant table.
func intConstTable() []byte {
	b := make([]byte, cIdx+4*32)
	for i := range 16 {
		b[cLow4+i] = 0x0f
		b[cBit4+i] = 0x10
		b[cLaneBt+i] = 1 << (i % 8)
		b[cBits45+i] = 0x30
		for q := range 4 {
			b[cIdx+32*q+i] = byte(2*q + i/8)
			b[cIdx+32*q+16+i] = byte(8 + 2*q + i/8)
		}
	}
	return b
}

// intFrame is the state of one integer kernel being written: its registers and how
// its n activation rows' pointers and accumulators are held.
type intFrame struct {
	g      *fn
	n      int
	lv     level
	p      *pool
	consts string        // the constant table's symbol
	facc   [intRows][4]V // row t's float sums of quarter q, when held in registers
	inRegs bool
	hoist  bool // constants of a quarter held in registers, not loaded at each use
}

// General registers: R0 the weights, R1 the blocks left, R2… the activation codes,
// R6… the side data, R10… the outputs of each row; R14 scratch, R19 the constants.
func xReg(t int) string    { return fmt.Sprintf("R%d", 2+t) }
func sideReg(t int) string { return fmt.Sprintf("R%d", 6+t) }
func outReg(t int) string  { return fmt.Sprintf("R%d", 10+t) }

// prologue loads the arguments and, when they fit, the float sums.
func (k *intFrame) prologue() {
	g := k.g
	g.op("MOVD w+0(FP), R0")
	g.op("MOVD blocks+8(FP), R1")
	rows := func(base, stride string, shift int, reg func(int) string) {
		g.op("MOVD %s, %s", base, reg(0))
		g.op("MOVD %s, R14", stride)
		if shift > 0 {
			g.op("LSL $%d, R14, R14", shift)
		}
		for t := 1; t < k.n; t++ {
			g.op("ADD R14, %s, %s", reg(t-1), reg(t))
		}
	}
	rows("x+16(FP)", "xstride+24(FP)", 0, xReg)
	rows("side+32(FP)", "sstride+40(FP)", 2, sideReg)
	rows("out+48(FP)", "ldo+56(FP)", 2, outReg)
	g.op("MOVD $%s(SB), R19", k.consts)
	if k.inRegs {
		for t := range k.n {
			for q := range 4 {
				k.facc[t][q] = k.p.get()
				g.op("FMOVQ %d(%s), F%d", 16*q, outReg(t), k.facc[t][q])
			}
		}
	}
}

// loop emits the loop over the blocks: body, then every pointer advanced.
func (k *intFrame) loop(gb, per, words int, body func()) {
	g := k.g
	g.label("loop")
	g.op("CBZ R1, done")
	body()
	g.op("ADD $%d, R0, R0", gb)
	for t := range k.n {
		g.op("ADD $%d, %s, %s", per, xReg(t), xReg(t))
		g.op("ADD $%d, %s, %s", 4*words, sideReg(t), sideReg(t))
	}
	g.op("SUB $1, R1, R1")
	g.op("B loop")
	g.label("done")
	if k.inRegs {
		for t := range k.n {
			for q := range 4 {
				g.op("FMOVQ F%d, %d(%s)", k.facc[t][q], 16*q, outReg(t))
			}
		}
	}
}

// load emits a 16-byte load of the weights at off into a new register.
func (k *intFrame) load(off int) V {
	v := k.p.get()
	k.g.op("FMOVQ %d(R0), F%d", off, v)
	return v
}

// constant loads the 16 bytes of the constant table at off into a new register.
func (k *intFrame) constant(off int) V {
	v := k.p.get()
	k.g.op("FMOVQ %d(R19), F%d", off, v)
	return v
}

// halves loads the four float16 values at off (a quarter's rows) as float32.
func (k *intFrame) halves(off int) V {
	v := k.p.get()
	k.g.op("FMOVD %d(R0), F%d", off, v)
	k.g.i(fcvtl(v, v, false))
	return v
}

// iacc is one activation row's integer sum of four rows: one register (SDOT) or two
// (SADALP's pairs).
type iacc struct{ a, b V }

// newAcc returns a zeroed accumulator.
func (k *intFrame) newAcc() iacc {
	c := iacc{a: k.p.get()}
	k.g.i(eor(c.a, c.a, c.a))
	if !k.lv.dot {
		c.b = k.p.get()
		k.g.i(eor(c.b, c.b, c.b))
	}
	return c
}

// dot adds to c the products of the quarter's codes w (4 per row) with the four
// activation codes in lane i of x.
func (k *intFrame) dot(c iacc, w, x V, i int) {
	if k.lv.dot {
		k.g.i(sdot(c.a, w, x, i))
		return
	}
	b, p := k.p.get(), k.p.get()
	k.g.i(dupElem("4s", b, x, i))
	k.g.i(smull("8b", p, w, b))  // rows 0 and 1
	k.g.i(smull("16b", b, w, b)) // rows 2 and 3
	k.g.i(sadalp("8h", c.a, p))
	k.g.i(sadalp("8h", c.b, b))
	k.p.put(b, p)
}

// sum ends an accumulator: the register holding the four rows' int32 sums.
func (k *intFrame) sum(c iacc) V {
	if !k.lv.dot {
		k.g.i(addp("4s", c.a, c.a, c.b))
		k.p.put(c.b)
	}
	return c.a
}

// addFloat adds v to row t's float sums of quarter q.
func (k *intFrame) addFloat(t, q int, v V) {
	if k.inRegs {
		k.g.i(fadd(k.facc[t][q], k.facc[t][q], v))
		return
	}
	a := k.p.get()
	k.g.op("FMOVQ %d(%s), F%d", 16*q, outReg(t), a)
	k.g.i(fadd(a, a, v))
	k.g.op("FMOVQ F%d, %d(%s)", a, 16*q, outReg(t))
	k.p.put(a)
}

// sideScalar loads side word i of row t into lane 0 of a new register.
func (k *intFrame) sideScalar(t, i int) V {
	v := k.p.get()
	k.g.op("FMOVS %d(%s), F%d", 4*i, sideReg(t), v)
	return v
}

// intType describes a weight type to the generator.
type intType struct {
	name  string
	gb    int  // bytes of a group block
	per   int  // values per block
	words int  // side words per block
	mm    bool // whether the body has an i8mm form
	body  func(k *intFrame)
}

// intTypes are the repacked types, with their block layouts (../repack.go) and side
// data (../act8.go).
func intTypes() []intType {
	return []intType{
		{"Q8_0", 544, 32, 8, true, func(k *intFrame) { block32(k, 32, -1, -1, -1, -1, true) }},
		{"Q4_0", 288, 32, 8, true, func(k *intFrame) { block32(k, 32, -1, -1, -1, 1, false) }},
		{"Q4_1", 320, 32, 8, true, func(k *intFrame) { block32(k, 64, -1, 32, -1, -1, false) }},
		{"Q4_Z", 304, 32, 8, true, func(k *intFrame) { block32(k, 48, -1, -1, 32, -1, false) }},
		{"Q4_Z128", 1072, 128, 8, false, blockZ128},
		{"Q5_0", 352, 32, 8, true, func(k *intFrame) { block32(k, 96, 32, -1, -1, 2, false) }},
		{"Q5_1", 384, 32, 8, true, func(k *intFrame) { block32(k, 128, 64, 32, -1, -1, false) }},
		{"Q4_K", 2368, 256, 32, false, func(k *intFrame) { blockKScaleMin(k, -1, 320) }},
		{"Q5_K", 2880, 256, 32, false, func(k *intFrame) { blockKScaleMin(k, 320, 832) }},
		{"Q6_K", 3360, 256, 32, false, blockQ6K},
	}
}

// intKernels writes the kernels of every type and level, for 1 to intRows activation
// rows or as many as fit the registers, and the Go functions that return them by type
// (int{Dot,NEON,I8MM}Table). The i8mm table takes, for each number of rows, the i8mm
// kernel where its loop is shorter than the dot-product one's, else the dot-product
// kernel (always for one row, which SMMLA cannot pair, and for the types with no
// i8mm form).
func intKernels(f *file) {
	consts := f.table("arm64IntConsts", intConstTable())
	f.goImports = append(f.goImports, "github.com/specula/specula/format/dtype")
	tables := map[level]map[string][]string{}
	for _, lv := range []level{levelDot, levelNEON, levelI8MM} {
		tables[lv] = map[string][]string{}
		for _, it := range intTypes() {
			dot := tables[levelDot][it.name]
			for n := 1; n <= intRows; n++ {
				var name string
				var ok bool
				switch {
				case lv == levelI8MM && (n == 1 || !it.mm):
					name, ok = alias(dot, n)
				case lv == levelI8MM:
					name, ok = shorterKernel(f, it, n, consts, dot)
				default:
					name, ok = intKernel(f, it, lv, n, consts)
				}
				if !ok {
					break
				}
				tables[lv][it.name] = append(tables[lv][it.name], name)
			}
		}
		writeIntTable(f, lv, tables[lv])
	}
}

// alias returns the n-row kernel of the table names, if it has one.
func alias(names []string, n int) (string, bool) {
	if n > len(names) {
		return "", false
	}
	return names[n-1], true
}

// shorterKernel writes the i8mm kernel of type it for n rows and returns its name if
// its loop is shorter than that of the n-row kernel of dot (already written); else it
// drops it and returns dot's.
func shorterKernel(f *file, it intType, n int, consts string, dot []string) (string, bool) {
	other, haveDot := alias(dot, n)
	name, ok := intKernel(f, it, levelI8MM, n, consts)
	switch {
	case !ok:
		return other, haveDot
	case !haveDot || f.find(name).loopLen() < f.find(other).loopLen():
		return name, true
	}
	f.funcs = f.funcs[:len(f.funcs)-1]
	return other, true
}

// writeIntTable writes the Go function that returns the kernels of level lv by type.
func writeIntTable(f *file, lv level, names map[string][]string) {
	fmt.Fprintf(&f.goCode, "\n// int%sTable returns the %s integer kernels of type t, by rows; empty for the types without.\n", lv.name, lv.name)
	fmt.Fprintf(&f.goCode, "func int%sTable(t dtype.DType) intTable {\nswitch t {\n", lv.name)
	for _, it := range intTypes() {
		fmt.Fprintf(&f.goCode, "case dtype.%s:\nreturn intTable{", it.name)
		for i, name := range names[it.name] {
			fmt.Fprintf(&f.goCode, "%d: %s, ", i+1, name)
		}
		f.goCode.WriteString("}\n")
	}
	f.goCode.WriteString("}\nreturn intTable{}\n}\n")
}

// intKernel writes the kernel of type it, level lv and n rows and returns its name,
// or reports that it does not fit the registers (and is left out): with the float
// sums and a quarter's constants in registers where they fit too, else in memory.
func intKernel(f *file, it intType, lv level, n int, consts string) (string, bool) {
	for _, o := range []struct{ inRegs, hoist bool }{{true, true}, {true, false}, {false, true}, {false, false}} {
		if tryIntKernel(f, it, lv, n, consts, o.inRegs, o.hoist) {
			return f.funcs[len(f.funcs)-1].name, true
		}
	}
	return "", false
}

// tryIntKernel writes the kernel with the float sums (inRegs) and a quarter's
// constants (hoist) in registers or not, and removes it again if it runs out of them.
func tryIntKernel(f *file, it intType, lv level, n int, consts string, inRegs, hoist bool) (ok bool) {
	name := fmt.Sprintf("int%sx%d%s", it.name, n, lv.name)
	doc := fmt.Sprintf("%s is the %s kernel of %s weights for %d activation rows.", name, lv.name, it.name, n)
	g := f.newFn(name, intSig, intArgs, doc)
	g.per, g.wbytes = it.per, it.gb
	defer func() {
		if r := recover(); r != nil {
			if r != errNoRegs {
				panic(r)
			}
			f.funcs = f.funcs[:len(f.funcs)-1]
			ok = false
		}
	}()
	k := &intFrame{g: g, n: n, lv: lv, p: newPool(), consts: consts, inRegs: inRegs, hoist: hoist}
	k.prologue()
	k.loop(it.gb, it.per, it.words, func() { it.body(k) })
	return true
}

// block32 is the block of the 32-value types: codes at byte codes of the group block
// (Q8_0: eight steps of signed codes; the others: four steps of nibbles, the low
// ones values 4p+k, the high ones 16+4p+k), fifth-bit masks at masks, minimums at
// mins and byte zeros at zeros (−1: none), the activations' offset at side word off
// (−1: none). Per quarter and row t: isum (+ offset) (+ z·(−Σx)) → v =
// float32(isum)·(d·dx) (+ m·(dx·Σx)) → acc + v, as format32 and finishQ8_0.
func block32(k *intFrame, codes, masks, mins, zeros, off int, q8 bool) {
	if k.lv == levelI8MM {
		block32MM(k, codes, masks, mins, zeros, off, q8)
		return
	}
	g := k.g
	var xs [intRows][2]V
	for t := range k.n {
		for h := range 2 {
			xs[t][h] = k.p.get()
			g.op("FMOVQ %d(%s), F%d", 16*h, xReg(t), xs[t][h])
		}
	}
	low4, fb := nibbleConsts(k, q8, masks)
	for q := range 4 {
		fb.quarter(k, q)
		var acc [intRows]iacc
		for t := range k.n {
			acc[t] = k.newAcc()
		}
		if q8 {
			for s := range 8 {
				w := k.load(codes + 64*s + 16*q)
				for t := range k.n {
					k.dot(acc[t], w, xs[t][s/4], s%4)
				}
				k.p.put(w)
			}
		} else {
			for p := range 4 {
				lo, hi := nibbleStep(k, fb, codes, masks, q, p, low4)
				for t := range k.n {
					k.dot(acc[t], lo, xs[t][0], p)
					k.dot(acc[t], hi, xs[t][1], p)
				}
				k.p.put(lo, hi)
			}
		}
		finish32(k, q, acc, mins, zeros, off)
	}
	k.p.put(low4)
	fb.release(k)
	for t := range k.n {
		k.p.put(xs[t][0], xs[t][1])
	}
}

// blockZ128 is one block of Q4_Z128 (block32's arithmetic for Q4_Z over 128 values,
// format32 in ../intdot_generic.go): per quarter q of the 16 rows, the 16 4-byte steps
// of code bytes (low nibbles: values 4p+k, high nibbles: 64+4p+k) against the
// activation rows' codes, loaded 16 at a time beside the 16 they pair with (the 128
// codes of a row would take 8 registers each), then finish32 as Q4_Z's, whose side
// words the 128-value activation blocks share.
func blockZ128(k *intFrame) {
	const codes, zeros = 48, 32
	g := k.g
	low4, fb := nibbleConsts(k, false, -1)
	for q := range 4 {
		fb.quarter(k, q)
		var acc [intRows]iacc
		for t := range k.n {
			acc[t] = k.newAcc()
		}
		for c := range 4 {
			var xs [intRows][2]V
			for t := range k.n {
				for h := range 2 {
					xs[t][h] = k.p.get()
					g.op("FMOVQ %d(%s), F%d", 16*c+64*h, xReg(t), xs[t][h])
				}
			}
			for p := 4 * c; p < 4*c+4; p++ {
				lo, hi := nibbleStep(k, fb, codes, -1, q, p, low4)
				for t := range k.n {
					k.dot(acc[t], lo, xs[t][0], p%4)
					k.dot(acc[t], hi, xs[t][1], p%4)
				}
				k.p.put(lo, hi)
			}
			for t := range k.n {
				k.p.put(xs[t][0], xs[t][1])
			}
		}
		finish32(k, q, acc, -1, zeros, -1)
	}
	k.p.put(low4)
	fb.release(k)
}

// nibbleConsts loads the constants of the 32-value types' unpacking: the low-nibble
// mask (none for Q8_0) and the fifth bits' (none without masks).
func nibbleConsts(k *intFrame, q8 bool, masks int) (low4 V, fb *fifth) {
	low4 = V(-1)
	if !q8 {
		low4 = k.constant(cLow4)
	}
	return low4, newFifth(k, masks)
}

// nibbleStep loads step p of quarter q of a 32-value type's nibble codes and unpacks
// it: the low nibbles (values 4p+k) and the high ones (16+4p+k), with their fifth
// bits where the type has them (masks ≥ 0).
func nibbleStep(k *intFrame, fb *fifth, codes, masks, q, p int, low4 V) (lo, hi V) {
	hi = k.load(codes + 64*p + 16*q)
	lo = k.p.get()
	k.g.i(and(lo, hi, low4))
	k.g.i(ushr("16b", hi, hi, 4))
	if masks >= 0 {
		fifthBits(k, fb, masks+16*p, q, lo, hi)
	}
	return lo, hi
}

// fifth holds what fifthBits needs: the constants, and the TBL indices of the current
// quarter where registers allow (else they are loaded at each use).
type fifth struct {
	bit4, laneBit V
	idx           [2]V
}

// newFifth loads the constants of fifthBits, or returns an empty fifth for the types
// without fifth bits (masks < 0).
func newFifth(k *intFrame, masks int) *fifth {
	if masks < 0 {
		return nil
	}
	return &fifth{bit4: k.constant(cBit4), laneBit: k.constant(cLaneBt), idx: [2]V{-1, -1}}
}

// quarter loads the TBL indices of quarter q into registers, if the kernel has them
// to spare (k.hoist).
func (f *fifth) quarter(k *intFrame, q int) {
	if f == nil {
		return
	}
	k.p.put(f.idx[:]...)
	f.idx = [2]V{-1, -1}
	if !k.hoist {
		return
	}
	for h := range 2 {
		f.idx[h] = k.constant(cIdx + 32*q + 16*h)
	}
}

// release frees the registers of f.
func (f *fifth) release(k *intFrame) {
	if f != nil {
		k.p.put(f.bit4, f.laneBit, f.idx[0], f.idx[1])
	}
}

// fifthBits sets bit 4 of the codes of lo and hi whose fifth bits are set in the two
// 8-byte masks at off, for the rows of quarter q: each lane's mask byte is spread to
// it by TBL and tested against the lane's bit (all ones where set), and bit 4 of
// that inserted into the code.
func fifthBits(k *intFrame, f *fifth, off, q int, lo, hi V) {
	m := k.load(off)
	e := k.p.get()
	for h, codes := range []V{lo, hi} {
		idx := f.idx[h]
		if idx < 0 {
			k.g.op("FMOVQ %d(R19), F%d", cIdx+32*q+16*h, e)
			idx = e
		}
		k.g.i(tbl(e, m, idx))
		k.g.i(cmtst("16b", e, e, f.laneBit))
		k.g.i(bit(codes, e, f.bit4)) // bit 4 of e where set
	}
	k.p.put(m, e)
}

// finish32 finishes quarter q's block for every row t, as format32 does: Q4_Z's
// zeros (the quarter's four bytes, widened) times −Σx (side word 5) are added to the
// integer sum.
func finish32(k *intFrame, q int, acc [intRows]iacc, mins, zeros, off int) {
	g := k.g
	d := k.halves(8 * q)
	m := V(-1)
	if mins >= 0 {
		m = k.halves(mins + 8*q)
	}
	z := V(-1)
	if zeros >= 0 {
		z = k.p.get()
		g.op("FMOVS %d(R0), F%d", zeros+4*q, z)
		g.i(uxtl("8b", z, z))
		g.i(uxtl("4h", z, z))
	}
	for t := range k.n {
		s := k.sum(acc[t])
		if off >= 0 {
			o := k.sideScalar(t, off)
			g.i(dupElem("4s", o, o, 0))
			g.i(add("4s", s, s, o))
			k.p.put(o)
		}
		if zeros >= 0 {
			o := k.sideScalar(t, 5)  // −Σx
			g.i(mlaElem(s, z, o, 0)) // + z·(−Σx)
			k.p.put(o)
		}
		dx := k.sideScalar(t, 0)
		scale := k.p.get()
		g.i(fmulElem(scale, d, dx, 0)) // d·dx
		g.i(scvtf(s, s))
		g.i(fmul(s, s, scale)) // float32(isum)·(d·dx)
		if mins >= 0 {
			ds := k.sideScalar(t, 4)
			g.i(fmulElem(scale, m, ds, 0)) // m·(dx·Σx)
			g.i(fadd(s, s, scale))
			k.p.put(ds)
		}
		k.addFloat(t, q, s)
		k.p.put(s, dx, scale)
	}
	k.p.put(d, m, z)
}

// blockKScaleMin is the super-block of Q4_K (masks −1) and Q5_K: per quarter, row t
// and sub-block pair i, the exact sums of sub-blocks 2i (low nibbles) and 2i+1 (high
// nibbles), multiplied by their integer scales into S; the minimums times the
// activations' sub-block sums into M; then as formatKScaleMin,
// v = float32(S)·d − float32(M)·dmin and acc + v·dx.
func blockKScaleMin(k *intFrame, masks, codes int) {
	low4, fb := k.constant(cLow4), newFifth(k, masks)
	for q := range 4 {
		fb.quarter(k, q)
		var s [intRows]V
		for t := range k.n {
			s[t] = k.zero()
		}
		for i := range 4 {
			kPair(k, q, i, masks, codes, s, low4, fb)
		}
		var m [intRows]V
		for t := range k.n {
			m[t] = kMins(k, q, t)
		}
		finishKScaleMin(k, q, s, m)
	}
	k.p.put(low4)
	fb.release(k)
}

// zero returns a zeroed register.
func (k *intFrame) zero() V {
	v := k.p.get()
	k.g.i(eor(v, v, v))
	return v
}

// kPair adds to each row's S the scaled sums of sub-blocks 2i and 2i+1 of quarter q.
func kPair(k *intFrame, q, i, masks, codes int, s [intRows]V, low4 V, fb *fifth) {
	g := k.g
	var xs [intRows][4]V
	var lo, hi [intRows]iacc
	for t := range k.n {
		for h := range 4 {
			xs[t][h] = k.p.get()
			g.op("FMOVQ %d(%s), F%d", 64*i+16*h, xReg(t), xs[t][h])
		}
		lo[t], hi[t] = k.newAcc(), k.newAcc()
	}
	for p := range 8 {
		wh := k.load(codes + 512*i + 64*p + 16*q)
		wl := k.p.get()
		g.i(and(wl, wh, low4))
		g.i(ushr("16b", wh, wh, 4))
		if masks >= 0 {
			fifthBits(k, fb, masks+128*i+16*p, q, wl, wh)
		}
		for t := range k.n {
			k.dot(lo[t], wl, xs[t][p/4], p%4)
			k.dot(hi[t], wh, xs[t][2+p/4], p%4)
		}
		k.p.put(wl, wh)
	}
	for t := range k.n {
		k.p.put(xs[t][:]...)
	}
	for h, j := range []int{2 * i, 2*i + 1} {
		sc := k.p.get()
		g.op("FMOVS %d(R0), F%d", 64+16*j+4*q, sc)
		g.i(uxtl("8b", sc, sc))
		g.i(uxtl("4h", sc, sc))
		for t := range k.n {
			acc := lo[t]
			if h == 1 {
				acc = hi[t]
			}
			v := k.sum(acc)
			g.i(mla("4s", s[t], v, sc)) // S += scale_j·isum_j
			k.p.put(v)
		}
		k.p.put(sc)
	}
}

// kMins returns row t's M = Σ_j min_j·Σx_j for the rows of quarter q: the minimums
// of sub-blocks 2k and 2k+1 side by side (widened to 16 bits) against the side
// data's pair of sums, multiplied and added in 32 bits (rows 0–1 and 2–3 apart,
// then their pairs added).
func kMins(k *intFrame, q, t int) V {
	g := k.g
	lo, hi := k.zero(), k.zero()
	mins, sx := k.p.get(), k.p.get()
	for kk := range 4 {
		g.op("FMOVD %d(R0), F%d", 192+32*kk+8*q, mins)
		g.i(uxtl("8b", mins, mins))
		g.op("FMOVS %d(%s), F%d", 4*(1+kk), sideReg(t), sx)
		g.i(dupElem("4s", sx, sx, 0))
		g.i(smlal("4h", lo, mins, sx))
		g.i(smlal("8h", hi, mins, sx))
	}
	g.i(addp("4s", lo, lo, hi))
	k.p.put(hi, mins, sx)
	return lo
}

// finishKScaleMin adds each row's v = float32(S)·d − float32(M)·dmin, times dx, to
// its float sums.
func finishKScaleMin(k *intFrame, q int, s, m [intRows]V) {
	g := k.g
	d, dmin := k.halves(8*q), k.halves(32+8*q)
	for t := range k.n {
		g.i(scvtf(s[t], s[t]))
		g.i(fmul(s[t], s[t], d))
		g.i(scvtf(m[t], m[t]))
		g.i(fmul(m[t], m[t], dmin))
		g.i(fsub(s[t], s[t], m[t]))
		dx := k.sideScalar(t, 0)
		g.i(fmulElem(s[t], s[t], dx, 0))
		k.addFloat(t, q, s[t])
		k.p.put(s[t], m[t], dx)
	}
	k.p.put(d, dmin)
}

// blockQ6K is the super-block of Q6_K: per quarter, half h and half of the steps,
// the four codes each step of ql/qh makes (values 128h + 32c + 4p + k), their exact
// sums by group of 16 (group 8h + 2c + p/4), each plus the activations' offset and
// times its scale into S; then acc + (float32(S)·d)·dx, as finishQ6_K.
func blockQ6K(k *intFrame) {
	low4, bits45 := k.constant(cLow4), k.constant(cBits45)
	for q := range 4 {
		var s [intRows]V
		for t := range k.n {
			s[t] = k.zero()
		}
		for h := range 2 {
			for half := range 2 {
				q6Steps(k, q, h, half, s, low4, bits45)
			}
		}
		finishQ6K(k, q, s)
	}
	k.p.put(low4, bits45)
}

// q6Steps adds to S the groups 8h + 2c + half (c = 0…3) of quarter q: steps p =
// 4·half … 4·half+3. S = Σ scale·(isum + offset) is exact in int32 in any order, so
// the scaled sum and the scaled offset go in apart.
func q6Steps(k *intFrame, q, h, half int, s [intRows]V, low4, bits45 V) {
	g := k.g
	var xs, acc [intRows][4]V
	var sums [intRows][4]iacc
	for t := range k.n {
		for c := range 4 {
			xs[t][c] = k.p.get()
			g.op("FMOVQ %d(%s), F%d", 128*h+32*c+16*half, xReg(t), xs[t][c])
			sums[t][c] = k.newAcc()
		}
	}
	for p := 4 * half; p < 4*half+4; p++ {
		at := 288 + 1536*h + 192*p + 16*q
		la, lb, hb := k.load(at), k.load(at+64), k.load(at+128)
		for c := range 4 {
			code := q6Code(k, c, la, lb, hb, low4, bits45)
			for t := range k.n {
				k.dot(sums[t][c], code, xs[t][c], p%4)
			}
			k.p.put(code)
		}
		k.p.put(la, lb, hb)
	}
	for t := range k.n {
		k.p.put(xs[t][:]...)
		for c := range 4 {
			acc[t][c] = k.sum(sums[t][c])
		}
	}
	// The offsets of groups 8h…8h+7, side words 5+8h…: group 8h+2c+half is lane
	// (2c+half)%4 of the first (2c+half < 4) or the second.
	var offs [intRows][2]V
	for t := range k.n {
		for i := range 2 {
			offs[t][i] = k.p.get()
			g.op("FMOVQ %d(%s), F%d", 4*(5+8*h+4*i), sideReg(t), offs[t][i])
		}
	}
	for c := range 4 {
		grp := 8*h + 2*c + half
		sc := q6Scale(k, q, grp)
		for t := range k.n {
			l := 2*c + half
			g.i(mla("4s", s[t], acc[t][c], sc))       // S += scale_g·isum_g
			g.i(mlaElem(s[t], sc, offs[t][l/4], l%4)) // S += scale_g·offset_g
			k.p.put(acc[t][c])
		}
		k.p.put(sc)
	}
	for t := range k.n {
		k.p.put(offs[t][:]...)
	}
}

// q6Code makes code c of a step's three bytes (codesQ6_K): the low or high nibble of
// ql byte la (c even) or lb (c odd), with bits 2c, 2c+1 of hb as bits 4 and 5 — hb
// shifted so that they are, then inserted by BIT under the mask 0x30 (the nibble's
// bits 4 and 5 are zero).
func q6Code(k *intFrame, c int, la, lb, hb, low4, bits45 V) V {
	g := k.g
	ql := la
	if c%2 == 1 {
		ql = lb
	}
	code := k.p.get()
	if c < 2 {
		g.i(and(code, ql, low4))
	} else {
		g.i(ushr("16b", code, ql, 4))
	}
	high := hb
	if sh := 2*c - 4; sh != 0 { // bits 2c, 2c+1 of hb to bits 4, 5
		high = k.p.get()
		if sh < 0 {
			g.i(shl("16b", high, hb, -sh))
		} else {
			g.i(ushr("16b", high, hb, sh))
		}
		defer k.p.put(high)
	}
	g.i(bit(code, high, bits45))
	return code
}

// q6Scale loads the int8 scales of group grp for the rows of quarter q as int32.
func q6Scale(k *intFrame, q, grp int) V {
	g := k.g
	sc := k.p.get()
	g.op("FMOVD %d(R0), F%d", 32+32*(grp/2)+8*q, sc)
	g.i(sxtl("8b", sc, sc))
	if grp%2 == 0 {
		g.i(uzp1("8h", sc, sc, sc))
	} else {
		g.i(uzp2("8h", sc, sc, sc))
	}
	g.i(sxtl("4h", sc, sc))
	return sc
}

// finishQ6K adds (float32(S)·d)·dx to each row's float sums.
func finishQ6K(k *intFrame, q int, s [intRows]V) {
	g := k.g
	d := k.halves(8 * q)
	for t := range k.n {
		g.i(scvtf(s[t], s[t]))
		g.i(fmul(s[t], s[t], d))
		dx := k.sideScalar(t, 0)
		g.i(fmulElem(s[t], s[t], dx, 0))
		k.addFloat(t, q, s[t])
		k.p.put(s[t], dx)
	}
	k.p.put(d)
}
