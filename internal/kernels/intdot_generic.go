package kernels

import (
	"encoding/binary"
	"sync"
	"unsafe"

	"github.com/specula/specula/format/dtype"
)

// The pure-Go integer kernels: the definition of what the assembly computes, to the
// bit. For one repacked group of 16 weight rows and n activation rows, each (weight
// row r, activation row t) pair walks the blocks in order; per block exact integer
// dot products of the codes (offsets folded in through the activations' side data;
// the K-quants' sub-block scales and minimums applied in integers too), then float32
// multiplies and adds in the order below, none of them fused. The
// assembly keeps the same operations per vector lane, so every implementation gives
// the same bits, on every machine and for every batch size. Here a row's codes are
// unpacked once per block and serve every activation row.

// intKernel computes, for the 16 rows of one repacked group of the given number of
// blocks and activation rows t = 0…n−1 (codes at x + t·xstride bytes, side data at
// side + t·sstride words), out[t·ldo + r] += W[r] · x[t] for r = 0…15: the sum goes on
// from the value out holds, block by block, so that a product can be computed a few
// blocks at a time — and gives the same bits as in one call.
type intKernel func(w *byte, blocks int, x *int8, xstride int, side *uint32, sstride int, out *float32, ldo int)

// intTable holds the kernels of one weight type by the number of activation rows they
// take; entries past the largest are nil.
type intTable [Group + 1]intKernel

// rows is the largest number of activation rows a kernel of the table takes.
func (k *intTable) rows() int {
	n := Group
	for k[n] == nil {
		n--
	}
	return n
}

// intFormat is the block arithmetic of a repacked type, in two steps: unpacking one
// row's codes, and finishing the product from the exact integer sums of the codes
// against the activations.
type intFormat struct {
	per, words int // values and activation side words per block
	seg        int // values per integer sum
	// codes writes the codes of row r of the group block blk to dst, in the order of
	// the values they weigh.
	codes func(blk []byte, r int, dst []int32)
	// finish adds the block's product to acc, from isum (the sums of seg codes times
	// their activations, in order) and the activations' side data.
	finish func(blk []byte, r int, isum []int32, side []uint32, acc float32) float32
}

// goInt makes the pure-Go kernel table of a weight type: entry n handles n activation
// rows.
func goInt(t dtype.DType) (k intTable) {
	f := intFormatOf(t)
	gb := groupBlockBytes(t)
	segs := f.per / f.seg
	// The unpacked codes and sums go through f's function values, so they would
	// escape to the heap on every call: each call borrows them from a pool instead,
	// and a forward allocates nothing.
	type scratch struct {
		codes [kBlock]int32
		isum  [kBlock / 16]int32
	}
	pool := sync.Pool{New: func() any { return new(scratch) }}
	for n := 1; n <= Group; n++ {
		k[n] = func(w *byte, blocks int, x *int8, xstride int, side *uint32, sstride int, out *float32, ldo int) {
			ws := unsafe.Slice(w, blocks*gb)
			var xs [Group][]int8
			var ss [Group][]uint32
			var os [Group][]float32
			for tt := range n {
				xs[tt] = unsafe.Slice((*int8)(unsafe.Add(unsafe.Pointer(x), tt*xstride)), blocks*f.per)
				ss[tt] = unsafe.Slice((*uint32)(unsafe.Add(unsafe.Pointer(side), 4*tt*sstride)), blocks*f.words)
				os[tt] = unsafe.Slice((*float32)(unsafe.Add(unsafe.Pointer(out), 4*tt*ldo)), rowGroup)
			}
			sc := pool.Get().(*scratch)
			defer pool.Put(sc)
			codes, isum := &sc.codes, &sc.isum
			for r := range rowGroup {
				for b := range blocks {
					blk := ws[b*gb : (b+1)*gb]
					f.codes(blk, r, codes[:f.per])
					for tt := range n {
						xb := xs[tt][b*f.per : (b+1)*f.per]
						for g := range segs {
							isum[g] = codeDot(codes[g*f.seg:(g+1)*f.seg], xb[g*f.seg:(g+1)*f.seg])
						}
						os[tt][r] = f.finish(blk, r, isum[:segs], ss[tt][b*f.words:(b+1)*f.words], os[tt][r])
					}
				}
			}
		}
	}
	return k
}

// codeDot is Σ c[i]·x[i], exactly.
func codeDot(c []int32, x []int8) int32 {
	x = x[:len(c)]
	var s int32
	for i, v := range c {
		s += v * int32(x[i])
	}
	return s
}

// intFormatOf returns the block arithmetic of type t.
func intFormatOf(t dtype.DType) intFormat {
	switch t {
	case dtype.Q8_0:
		return intFormat{q8Block, side32Words, q8Block, codesQ8_0, finishQ8_0}
	case dtype.Q4_0:
		return format32(32, -1, -1, -1, side32Off8)
	case dtype.Q4_1:
		return format32(64, -1, 32, -1, -1)
	case dtype.Q4_Z:
		return format32(48, -1, -1, 32, -1)
	case dtype.Q4_Z128:
		return formatZ(z128Block, 48, 32)
	case dtype.Q5_0:
		return format32(96, 32, -1, -1, side32Off16)
	case dtype.Q5_1:
		return format32(128, 64, 32, -1, -1)
	case dtype.Q4_K:
		return formatKScaleMin(-1, 320)
	case dtype.Q5_K:
		return formatKScaleMin(320, 832)
	case dtype.Q6_K:
		return intFormat{kBlock, side256Words, 16, codesQ6_K, finishQ6_K}
	}
	panic("kernels: no integer kernel for " + t.String())
}

// half reads float16 r of the 16 at the start of b.
func half(b []byte, r int) float32 { return dtype.F16ToF32(binary.LittleEndian.Uint16(b[2*r:])) }

// nibbles writes the codes of four-byte steps p = 0…steps−1 of the code bytes at codes
// to dst[4p+k]: the low nibbles (hi false) or the high ones, plus the fifth bits of the
// masks at masks (16 bytes per step, the first 8 for the low nibbles).
func nibbles(codes []byte, r, steps int, hi bool, masks []byte, dst []int32) {
	for p := range steps {
		for k := range 4 {
			c := int32(codes[64*p+4*r+k])
			if hi {
				c >>= 4
			}
			c &= 0xf
			if masks != nil {
				m := masks[16*p:]
				if hi {
					m = m[8:]
				}
				if maskBit(m, r, k) {
					c |= 16
				}
			}
			dst[4*p+k] = c
		}
	}
}

func codesQ8_0(blk []byte, r int, dst []int32) {
	for p := range 8 {
		for k := range 4 {
			dst[4*p+k] = int32(int8(blk[32+64*p+4*r+k]))
		}
	}
}

func finishQ8_0(blk []byte, r int, isum []int32, side []uint32, acc float32) float32 {
	return acc + float32(float32(isum[0])*float32(half(blk, r)*sideF(side[sideD])))
}

// format32 is the block arithmetic of the 32-value nibble types, their codes at byte
// codes of the block, fifth bits at masks, float16 minimums at mins and byte zeros at
// zeros (−1: none): isum, which begins at the offset word off of the side data (0
// when off < 0), and for the types with a zero (Q4_Z) at z·(−Σx) (−Σx from the side
// data) — the exact Σ(q − z)·x, as Q4_0's Σ(q − 8)·x, so
// that Q4_Z with z = 8 gives Q4_0's bits, and a block whose codes all equal its zero
// gives 0 (Q4_1's arithmetic, m = −d·z in float32, would not: its two terms cancel
// only to their rounding); v = isum·(d·dx), plus m·(dx·Σx) for the types with a
// minimum; acc + v. (One add per block depends on the block before: the kernels'
// loops are not held up by the latency of the others.)
func format32(codes, masks, mins, zeros, off int) intFormat {
	return formatNibbles(q8Block, codes, masks, mins, zeros, off)
}

// formatZ is the block arithmetic of Q4_Z128 (per = 128): Q4_Z's for blocks of per
// values, on activation blocks of as many (act8.go): isum = Σq·x + z·(−Σx), exact in
// int32 (|isum| ≤ 128·15·127·2 < 2^19), v = isum·(d·dx), acc + v — one float
// conversion and multiply per 128 values where Q4_Z has four.
func formatZ(per, codes, zeros int) intFormat {
	return formatNibbles(per, codes, -1, -1, zeros, -1)
}

// formatNibbles is format32 for blocks of per values (32 or 128), the code bytes in
// 4-byte steps of 16 rows: low nibbles values 4p+k, high nibbles values per/2+4p+k.
func formatNibbles(per, codes, masks, mins, zeros, off int) intFormat {
	steps := per / 8
	unpack := func(blk []byte, r int, dst []int32) {
		var mk []byte
		if masks >= 0 {
			mk = blk[masks:]
		}
		nibbles(blk[codes:], r, steps, false, mk, dst[:per/2])
		nibbles(blk[codes:], r, steps, true, mk, dst[per/2:per])
	}
	finish := func(blk []byte, r int, isum []int32, side []uint32, acc float32) float32 {
		s := isum[0]
		if off >= 0 {
			s += int32(side[off])
		}
		if zeros >= 0 {
			s += int32(blk[zeros+r]) * int32(side[side32Neg])
		}
		dx := sideF(side[sideD])
		v := float32(float32(s) * float32(half(blk, r)*dx))
		if mins >= 0 {
			v += float32(half(blk[mins:], r) * sideF(side[side32DSum]))
		}
		return acc + v
	}
	return intFormat{per, side32Words, per, unpack, finish}
}

// formatKScaleMin is the super-block arithmetic of Q4_K and Q5_K: per sub-block j
// (the low nibbles of code bytes 512i… for j = 2i, the high ones for j = 2i+1) an
// exact isum_j; then, exactly in int32, S = Σ_j scale_j·isum_j and M = Σ_j min_j·Σx_j
// (Σx_j from the side data); v = S·d − M·dmin, acc + v·dx. (|S| < 2^27 and |M| < 2^21:
// no sum overflows, and so neither does 16·S, which the VNNI kernels compute.)
func formatKScaleMin(masks, codes int) intFormat {
	unpack := func(blk []byte, r int, dst []int32) {
		for j := range 8 {
			i := j / 2
			var mk []byte
			if masks >= 0 {
				mk = blk[masks+128*i:]
			}
			nibbles(blk[codes+512*i:], r, 8, j%2 == 1, mk, dst[32*j:32*j+32])
		}
	}
	finish := func(blk []byte, r int, isum []int32, side []uint32, acc float32) float32 {
		var s, m int32
		for j := range 8 {
			s += int32(blk[64+16*j+r]) * isum[j]
			m += int32(blk[kMinAt(j, r)]) * sideSum(side, j)
		}
		v := float32(float32(s)*half(blk, r)) - float32(float32(m)*half(blk[32:], r))
		return acc + float32(v*sideF(side[sideD]))
	}
	return intFormat{kBlock, side256Words, 32, unpack, finish}
}

// kMinAt is the offset of the minimum of sub-block j of row r in a Q4_K or Q5_K group
// block: the minimums of sub-blocks 2k and 2k+1 side by side for each row.
func kMinAt(j, r int) int { return 192 + 32*(j/2) + 2*r + j%2 }

// q6ScaleAt is the offset of the scale of group g of row r in a Q6_K group block: the
// scales of groups 2k and 2k+1 side by side for each row.
func q6ScaleAt(g, r int) int { return 32 + 32*(g/2) + 2*r + g%2 }

// codesQ6_K unpacks the 6-bit codes: value 128h + 32q + 4p + k (half h, quarter q,
// 4-byte step p) from the low or high nibbles of ql with two bits of qh.
func codesQ6_K(blk []byte, r int, dst []int32) {
	for h := range 2 {
		for p := range 8 {
			at := 288 + 1536*h + 192*p
			for k := range 4 {
				la, lb, hb := blk[at+4*r+k], blk[at+64+4*r+k], blk[at+128+4*r+k]
				v := dst[128*h+4*p+k:]
				v[0] = int32(la&0xf | hb&3<<4)
				v[32] = int32(lb&0xf | hb>>2&3<<4)
				v[64] = int32(la>>4 | hb>>4&3<<4)
				v[96] = int32(lb>>4 | hb>>6&3<<4)
			}
		}
	}
}

// finishQ6_K: per 16-value group g, isum_g of (q − 32)·x (the offset folded in from
// the side data); exactly in int32, S = Σ_g scale_g·isum_g (|S| ≤ 16·128·16·32·127 <
// 2^28); acc + (S·d)·dx.
func finishQ6_K(blk []byte, r int, isum []int32, side []uint32, acc float32) float32 {
	var s int32
	for g := range 16 {
		s += int32(int8(blk[q6ScaleAt(g, r)])) * (isum[g] + int32(side[side256Off+g]))
	}
	return acc + float32(float32(float32(s)*half(blk, r))*sideF(side[sideD]))
}

// intKernels returns the kernel table of a repacked type on this machine.
func intKernels(t dtype.DType) *intTable {
	switch t {
	case dtype.Q8_0:
		return &intQ8_0
	case dtype.Q4_0:
		return &intQ4_0
	case dtype.Q4_1:
		return &intQ4_1
	case dtype.Q4_Z:
		return &intQ4_Z
	case dtype.Q4_Z128:
		return &intQ4_Z128
	case dtype.Q5_0:
		return &intQ5_0
	case dtype.Q5_1:
		return &intQ5_1
	case dtype.Q4_K:
		return &intQ4_K
	case dtype.Q5_K:
		return &intQ5_K
	}
	return &intQ6_K
}
