package kernels

import (
	"encoding/binary"
	"unsafe"

	"github.com/specula/specula/model/dtype"
)

// The pure-Go integer kernels: the definition of what the assembly computes, to the
// bit. For one repacked group of 16 weight rows and n activation rows, each (weight
// row r, activation row t) pair walks the blocks in order; per block an exact integer
// dot product of the codes (offsets folded in through the activations' side data),
// then float32 multiplies and adds in the order below, none of them fused. The
// assembly keeps the same operations per vector lane, so every implementation gives
// the same bits, on every machine and for every batch size.

// intKernel computes, for the 16 rows of one repacked group of the given number of
// blocks and activation rows t = 0…n−1 (codes at x + t·xstride bytes, side data at
// side + t·sstride words), out[t·ldo + r] += W[r] · x[t] for r = 0…15: the sum goes on
// from the value out holds, block by block, so that a product can be computed a few
// blocks at a time — and gives the same bits as in one call.
type intKernel func(w *byte, blocks int, x *int8, xstride int, side *uint32, sstride int, out *float32, ldo int)

// blockDot adds the product of one block of weight row r (of the group block blk) and
// one block of activation codes x, with its side data, to acc.
type blockDot func(blk []byte, r int, x []int8, side []uint32, acc float32) float32

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

// goInt makes the pure-Go kernel table of a weight type: entry n handles n activation
// rows.
func goInt(t dtype.DType) (k intTable) {
	dot, per, words := intBlockDot(t)
	gb := groupBlockBytes(t)
	for n := 1; n <= Group; n++ {
		k[n] = func(w *byte, blocks int, x *int8, xstride int, side *uint32, sstride int, out *float32, ldo int) {
			ws := unsafe.Slice(w, blocks*gb)
			for tt := range n {
				xs := unsafe.Slice((*int8)(unsafe.Add(unsafe.Pointer(x), tt*xstride)), blocks*per)
				ss := unsafe.Slice((*uint32)(unsafe.Add(unsafe.Pointer(side), 4*tt*sstride)), blocks*words)
				os := unsafe.Slice((*float32)(unsafe.Add(unsafe.Pointer(out), 4*tt*ldo)), rowGroup)
				for r := range rowGroup {
					acc := os[r]
					for b := range blocks {
						acc = dot(ws[b*gb:(b+1)*gb], r, xs[b*per:(b+1)*per], ss[b*words:(b+1)*words], acc)
					}
					os[r] = acc
				}
			}
		}
	}
	return k
}

// intBlockDot returns the block product of type t, the values per block and the side
// words per block of its activations.
func intBlockDot(t dtype.DType) (blockDot, int, int) {
	switch t {
	case dtype.Q8_0:
		return dotQ8_0Block, q8Block, side32Words
	case dtype.Q4_0:
		return dotQ4_0Block, q8Block, side32Words
	case dtype.Q4_1:
		return dotQ4_1Block, q8Block, side32Words
	case dtype.Q5_0:
		return dotQ5_0Block, q8Block, side32Words
	case dtype.Q5_1:
		return dotQ5_1Block, q8Block, side32Words
	case dtype.Q4_K:
		return dotQ4_KBlock, kBlock, side256Words
	case dtype.Q5_K:
		return dotQ5_KBlock, kBlock, side256Words
	case dtype.Q6_K:
		return dotQ6_KBlock, kBlock, side256Words
	}
	panic("kernels: no integer kernel for " + t.String())
}

// half reads float16 r of the 16 at the start of b.
func half(b []byte, r int) float32 { return F16ToF32(binary.LittleEndian.Uint16(b[2*r:])) }

// scaled adds isum·s to acc: a multiply, then an add, each rounded.
func scaled(acc float32, isum int32, s float32) float32 {
	return acc + float32(float32(isum)*s)
}

// nibbleDot is Σ code·x over the four-byte steps p = 0…steps−1 of the code bytes at
// codes, taking the low nibbles (hi false) or the high ones, plus the fifth bits of the
// masks at masks (16 bytes per step, the first 8 for the low nibbles), against
// x[xoff(p)+k].
func nibbleDot(codes []byte, r, steps int, hi bool, masks []byte, x []int8, xoff func(p int) int) int32 {
	var s int32
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
			s += c * int32(x[xoff(p)+k])
		}
	}
	return s
}

// dot32 is the block product of the 32-value types: isum, which begins at the
// offset word of the side data (0 when off < 0); v = isum·(d·dx), plus m·(dx·Σx) for
// the types with a minimum; acc + v. (One add per block depends on the block before:
// the kernels' loops are not held up by the latency of the others.)
func dot32(blk []byte, r int, x []int8, side []uint32, acc float32, codes, masks, mins, off int) float32 {
	var isum int32
	if off >= 0 {
		isum = int32(side[off])
	}
	var mk []byte
	if masks >= 0 {
		mk = blk[masks:]
	}
	isum += nibbleDot(blk[codes:], r, 4, false, mk, x, func(p int) int { return 4 * p })
	isum += nibbleDot(blk[codes:], r, 4, true, mk, x, func(p int) int { return 16 + 4*p })
	dx := sideF(side[sideD])
	v := float32(float32(isum) * float32(half(blk, r)*dx))
	if mins >= 0 {
		v += float32(half(blk[mins:], r) * sideF(side[side32DSum]))
	}
	return acc + v
}

func dotQ4_0Block(blk []byte, r int, x []int8, side []uint32, acc float32) float32 {
	return dot32(blk, r, x, side, acc, 32, -1, -1, side32Off8)
}

func dotQ4_1Block(blk []byte, r int, x []int8, side []uint32, acc float32) float32 {
	return dot32(blk, r, x, side, acc, 64, -1, 32, -1)
}

func dotQ5_0Block(blk []byte, r int, x []int8, side []uint32, acc float32) float32 {
	return dot32(blk, r, x, side, acc, 96, 32, -1, side32Off16)
}

func dotQ5_1Block(blk []byte, r int, x []int8, side []uint32, acc float32) float32 {
	return dot32(blk, r, x, side, acc, 128, 64, 32, -1)
}

func dotQ8_0Block(blk []byte, r int, x []int8, side []uint32, acc float32) float32 {
	var isum int32
	for p := range 8 {
		for k := range 4 {
			isum += int32(int8(blk[32+64*p+4*r+k])) * int32(x[4*p+k])
		}
	}
	return acc + float32(float32(isum)*float32(half(blk, r)*sideF(side[sideD])))
}

// dotKScaleMin is the super-block product of Q4_K and Q5_K: per sub-block j an exact
// isum_j; tmp = Σ_j isum_j·(d·scale_j) and corr = Σ_j (dmin·min_j)·(dx·Σx_j), each in
// order of j; acc + (tmp·dx − corr).
func dotKScaleMin(blk []byte, r int, x []int8, side []uint32, acc float32, masks, codes int) float32 {
	d, dmin := half(blk, r), half(blk[32:], r)
	var tmp float32
	for j := range 8 {
		i := j / 2
		var mk []byte
		if masks >= 0 {
			mk = blk[masks+128*i:]
		}
		isum := nibbleDot(blk[codes+512*i:], r, 8, j%2 == 1, mk, x, func(p int) int { return 64*i + 32*(j%2) + 4*p })
		tmp = scaled(tmp, isum, d*float32(blk[64+16*j+r]))
	}
	var corr float32
	for j := range 8 {
		corr += float32(float32(dmin*float32(blk[192+16*j+r])) * sideF(side[side256Min+j]))
	}
	return acc + (float32(tmp*sideF(side[sideD])) - corr)
}

func dotQ4_KBlock(blk []byte, r int, x []int8, side []uint32, acc float32) float32 {
	return dotKScaleMin(blk, r, x, side, acc, -1, 320)
}

func dotQ5_KBlock(blk []byte, r int, x []int8, side []uint32, acc float32) float32 {
	return dotKScaleMin(blk, r, x, side, acc, 320, 832)
}

// q6KOrder is the order in which the Q6_K kernels finish the 16-value groups of a
// super-block, and so add them up: for each half h, the four quarters of values
// 0…15 of each 32, then of values 16…31.
var q6KOrder = [16]int{0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15}

// dotQ6_KBlock is the super-block product of Q6_K: per 16-value group g an exact
// isum_g of (q − 32)·x (the offset folded in from the side data), tmp = Σ_g
// isum_g·(d·scale_g) in q6KOrder, acc + tmp·dx.
func dotQ6_KBlock(blk []byte, r int, x []int8, side []uint32, acc float32) float32 {
	d := half(blk, r)
	var tmp float32
	for _, g := range q6KOrder {
		h, q, p0 := g/8, g%8/2, 4*(g%2) // half, quarter, first 4-byte step
		isum := int32(side[side256Off+g])
		for p := p0; p < p0+4; p++ {
			at := 288 + 1536*h + 192*p
			for k := range 4 {
				la, lb, hb := blk[at+4*r+k], blk[at+64+4*r+k], blk[at+128+4*r+k]
				var c byte
				switch q {
				case 0:
					c = la&0xf | hb&3<<4
				case 1:
					c = lb&0xf | hb>>2&3<<4
				case 2:
					c = la>>4 | hb>>4&3<<4
				case 3:
					c = lb>>4 | hb>>6&3<<4
				}
				isum += int32(c) * int32(x[128*h+32*q+4*p+k])
			}
		}
		tmp = scaled(tmp, isum, d*float32(int8(blk[32+16*g+r])))
	}
	return acc + float32(tmp*sideF(side[sideD]))
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
