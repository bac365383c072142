package kernels

import (
	"encoding/binary"
	"math"

	"github.com/specula/specula/format/dtype"
)

// Quantised weights are repacked when a matrix is made, from llama.cpp's row-major
// blocks into groups of rowGroup rows: for each block of the rows, the group's scales
// side by side, then its codes interleaved four bytes at a time, row after row. A
// 64-byte vector load then holds four consecutive codes of each of 16 rows, and one
// integer multiply-add (VPDPBUSD) against four activation bytes broadcast to every lane
// advances all 16 rows' dot products at once: each vector lane is one row's sum from
// start to end, so nothing is ever summed across lanes, and a row's result is the same
// whatever the batch around it. Scales that llama.cpp packs in bits are unpacked to a
// byte each, and fifth bits become byte masks, so that the kernels spend no work on
// them; the group is at most 3 % larger than its 16 rows of blocks.
//
// The float types are repacked too, a column at a time: for each column, the 16 rows'
// values side by side, so that a vector load holds one column of 16 rows and a
// multiply-add by one activation value broadcast advances 16 rows' sums.
//
// F8_E4M3_B128 is a float type to the kernels (its products are float products of
// exactly its decoded values, see floatdot.go), repacked by its 128-column blocks:
// the 16 rows' scales, each multiplied by 2⁸ (exactly: the scales are below
// dtype.F8MaxScale), then for each column the 16 rows' e4m3 codes side by side, which
// the kernels turn into the float16 dtype.E4M3Half, e4m3 · 2⁻⁸, and multiply by the
// folded scale — the weight dtype.Dequantize gives, rounded once.
//
// The layouts, for one block of a group (r is the row in the group, 0…15; "codes 4p+k"
// are bytes 4p…4p+3 of a row's block of codes, the four codes of row r at 4r+k):
//
//   - Q8_0, 544 bytes: d[16] (float16), then for p = 0…7 the codes 4p+k of every row.
//   - Q4_0, 288 bytes: d[16], then for p = 0…3 the code bytes 4p+k (low nibbles: values
//     4p+k, high nibbles: values 16+4p+k).
//   - Q4_1, 320 bytes: d[16], m[16], the Q4_0 code bytes.
//   - Q4_Z, 304 bytes: d[16], z[16] (a byte each, the rows' zeros), the Q4_0 code
//     bytes: 4.75 bits a weight.
//   - Q4_Z128, 1072 bytes: d[16], z[16], then for p = 0…15 the code bytes 4p+k (low
//     nibbles: values 4p+k, high nibbles: values 64+4p+k): 4.19 bits a weight.
//   - Q5_0, 352 bytes: d[16], for p = 0…3 two 8-byte masks whose bit 4r+k is the fifth
//     bit of value 4p+k (the first) and 16+4p+k (the second) of row r, the Q4_0 bytes.
//   - Q5_1, 384 bytes: d[16], m[16], the masks, the code bytes.
//   - Q4_K, 2368 bytes: d[16], dmin[16], scale[j][r] (a byte each, j = 0…7 the
//     sub-block), min[k][r][e] (a byte each: the minimum of sub-block 2k+e, the two of
//     a row side by side, to be widened to a 16-bit pair), then for i = 0…3 and p =
//     0…7 the code bytes 32i+4p+k (low nibbles: sub-block 2i, high nibbles: sub-block
//     2i+1).
//   - Q5_K, 2880 bytes: d, dmin, scales and mins as Q4_K, for i = 0…3 and p = 0…7 the two
//     masks of the fifth bits of the low and high nibbles, the Q4_K code bytes.
//   - Q6_K, 3360 bytes: d[16], scale[k][r][e] (int8, the scale of the 16-value group
//     g = 2k+e; a row's two side by side, to be widened to a 16-bit pair), then for
//     h = 0…1 and p = 0…7 the bytes ql[64h+4p+k], ql[64h+32+4p+k] and qh[32h+4p+k].
//   - F8_E4M3_B128, 2112 bytes: s[16] (float32, scale · 2⁸), then for c = 0…127 the
//     codes of column c of every row, code[c][r] at 64+16c+r.
const rowGroup = 16

// groupBlockBytes is the size of one block of a repacked group of type t. The float
// types' block is one column: the 16 rows' values of it, side by side.
func groupBlockBytes(t dtype.DType) int {
	switch t {
	case dtype.F32:
		return 64
	case dtype.F16, dtype.BF16:
		return 32
	case dtype.Q8_0:
		return 544
	case dtype.Q4_0:
		return 288
	case dtype.Q4_1:
		return 320
	case dtype.Q4_Z:
		return 304
	case dtype.Q4_Z128:
		return 1072
	case dtype.Q5_0:
		return 352
	case dtype.Q5_1:
		return 384
	case dtype.Q4_K:
		return 2368
	case dtype.Q5_K:
		return 2880
	case dtype.Q6_K:
		return 3360
	case dtype.F8_E4M3_B128:
		return 2112
	}
	return 0
}

// repack lays out rows of blocks of type t (row-major, rowBytes each) in row groups,
// the last padded with zero rows, in memory that lives as long as owner.
func repack(t dtype.DType, data []byte, rows, rowBytes int, owner *Matrix) []byte {
	bs := t.BlockBytes()
	blocks := rowBytes / bs
	gb := groupBlockBytes(t)
	groups := (rows + rowGroup - 1) / rowGroup
	out := weightBytes(groups*blocks*gb, owner)
	zero := make([]byte, bs)
	var src [rowGroup][]byte
	for g := range groups {
		for b := range blocks {
			for r := range rowGroup {
				src[r] = zero
				if row := g*rowGroup + r; row < rows {
					src[r] = data[row*rowBytes+b*bs : row*rowBytes+(b+1)*bs]
				}
			}
			packBlock(t, out[(g*blocks+b)*gb:(g*blocks+b+1)*gb], &src)
		}
	}
	return out
}

// unpackRow writes row r of repacked data back into llama.cpp's blocks.
func unpackRow(t dtype.DType, packed []byte, blocks, r int, dst []byte) {
	bs := t.BlockBytes()
	gb := groupBlockBytes(t)
	g, lane := r/rowGroup, r%rowGroup
	for b := range blocks {
		unpackBlock(t, packed[(g*blocks+b)*gb:(g*blocks+b+1)*gb], lane, dst[b*bs:(b+1)*bs])
	}
}

// interleave copies n bytes at off of every row's block to dst, four bytes at a time:
// for each 4-byte step p, the rows' four bytes side by side.
func interleave(dst []byte, src *[rowGroup][]byte, off, n int) {
	for p := range n / 4 {
		for r := range rowGroup {
			copy(dst[64*p+4*r:64*p+4*r+4], src[r][off+4*p:])
		}
	}
}

// deinterleave is the inverse of interleave for one row.
func deinterleave(dst []byte, src []byte, lane, n int) {
	for p := range n / 4 {
		copy(dst[4*p:4*p+4], src[64*p+4*lane:])
	}
}

// copyHalves copies the float16 at off of every row's block to dst, side by side.
func copyHalves(dst []byte, src *[rowGroup][]byte, off int) {
	for r := range rowGroup {
		copy(dst[2*r:2*r+2], src[r][off:off+2])
	}
}

// fifthBitMasks writes, for p = 0…n−1, the two 8-byte masks of the Q5 layouts: bit
// 4r+k of the first is bit(r, lo(p, k)) and of the second bit(r, hi(p, k)).
func fifthBitMasks(dst []byte, n int, bit func(r, value int) bool, lo, hi func(p, k int) int) {
	for p := range n {
		var a, b uint64
		for r := range rowGroup {
			for k := range 4 {
				if bit(r, lo(p, k)) {
					a |= 1 << (4*r + k)
				}
				if bit(r, hi(p, k)) {
					b |= 1 << (4*r + k)
				}
			}
		}
		binary.LittleEndian.PutUint64(dst[16*p:], a)
		binary.LittleEndian.PutUint64(dst[16*p+8:], b)
	}
}

// maskBit reads bit 4·lane+k of the 8-byte mask at m.
func maskBit(m []byte, lane, k int) bool {
	return binary.LittleEndian.Uint64(m)>>(4*lane+k)&1 != 0
}

// packBlock lays out one block of 16 rows (src[r] the block of row r).
func packBlock(t dtype.DType, dst []byte, src *[rowGroup][]byte) {
	switch t {
	case dtype.F32, dtype.F16, dtype.BF16:
		size := t.BlockBytes()
		for r := range rowGroup {
			copy(dst[size*r:size*(r+1)], src[r])
		}
	case dtype.Q8_0:
		copyHalves(dst, src, 0)
		interleave(dst[32:], src, 2, 32)
	case dtype.Q4_0:
		copyHalves(dst, src, 0)
		interleave(dst[32:], src, 2, 16)
	case dtype.Q4_1:
		copyHalves(dst, src, 0)
		copyHalves(dst[32:], src, 2)
		interleave(dst[64:], src, 4, 16)
	case dtype.Q4_Z:
		copyHalves(dst, src, 0)
		for r := range rowGroup {
			dst[32+r] = src[r][2]
		}
		interleave(dst[48:], src, 4, 16)
	case dtype.Q4_Z128:
		copyHalves(dst, src, 0)
		for r := range rowGroup {
			dst[32+r] = src[r][2]
		}
		interleave(dst[48:], src, 4, 64)
	case dtype.Q5_0, dtype.Q5_1:
		qh, qs, at := 2, 6, 32
		if t == dtype.Q5_1 {
			qh, qs, at = 4, 8, 64
			copyHalves(dst[32:], src, 2)
		}
		copyHalves(dst, src, 0)
		bit := func(r, v int) bool { return binary.LittleEndian.Uint32(src[r][qh:])>>v&1 != 0 }
		fifthBitMasks(dst[at:], 4, bit, func(p, k int) int { return 4*p + k }, func(p, k int) int { return 16 + 4*p + k })
		interleave(dst[at+64:], src, qs, 16)
	case dtype.Q4_K, dtype.Q5_K:
		copyHalves(dst, src, 0)
		copyHalves(dst[32:], src, 2)
		for r := range rowGroup {
			for j := range 8 {
				dst[64+16*j+r], dst[kMinAt(j, r)] = dtype.KScaleMin(j, src[r][4:16])
			}
		}
		codes, qs := 320, 16
		if t == dtype.Q5_K {
			// Bit 2i of qh[l] is the fifth bit of value 64i+l, bit 2i+1 of value 64i+32+l.
			bit := func(r, v int) bool { return src[r][16+v%32]>>(2*(v/64)+v%64/32)&1 != 0 }
			for i := range 4 {
				fifthBitMasks(dst[320+128*i:], 8, bit,
					func(p, k int) int { return 64*i + 4*p + k }, func(p, k int) int { return 64*i + 32 + 4*p + k })
			}
			codes, qs = 832, 48
		}
		interleave(dst[codes:], src, qs, 128)
	case dtype.F8_E4M3_B128:
		for r := range rowGroup {
			s := math.Float32frombits(binary.LittleEndian.Uint32(src[r]))
			binary.LittleEndian.PutUint32(dst[4*r:], math.Float32bits(s*(1<<8)))
			for c, code := range src[r][4:] {
				dst[64+16*c+r] = code
			}
		}
	case dtype.Q6_K:
		copyHalves(dst, src, 208)
		for r := range rowGroup {
			for g := range 16 {
				dst[q6ScaleAt(g, r)] = src[r][192+g]
			}
		}
		for h := range 2 {
			for p := range 8 {
				at := 288 + 1536*h + 192*p
				for r := range rowGroup {
					copy(dst[at+4*r:at+4*r+4], src[r][64*h+4*p:])
					copy(dst[at+64+4*r:at+64+4*r+4], src[r][64*h+32+4*p:])
					copy(dst[at+128+4*r:at+128+4*r+4], src[r][128+32*h+4*p:])
				}
			}
		}
	}
}

// unpackBlock writes the block of row lane back into llama.cpp's layout.
func unpackBlock(t dtype.DType, src []byte, lane int, dst []byte) {
	half := func(at int) []byte { return src[at+2*lane : at+2*lane+2] }
	switch t {
	case dtype.F32, dtype.F16, dtype.BF16:
		size := t.BlockBytes()
		copy(dst, src[size*lane:size*(lane+1)])
	case dtype.Q8_0:
		copy(dst, half(0))
		deinterleave(dst[2:], src[32:], lane, 32)
	case dtype.Q4_0:
		copy(dst, half(0))
		deinterleave(dst[2:], src[32:], lane, 16)
	case dtype.Q4_1:
		copy(dst, half(0))
		copy(dst[2:], half(32))
		deinterleave(dst[4:], src[64:], lane, 16)
	case dtype.Q4_Z:
		copy(dst, half(0))
		dst[2], dst[3] = src[32+lane], 0
		deinterleave(dst[4:], src[48:], lane, 16)
	case dtype.Q4_Z128:
		copy(dst, half(0))
		dst[2], dst[3] = src[32+lane], 0
		deinterleave(dst[4:], src[48:], lane, 64)
	case dtype.Q5_0, dtype.Q5_1:
		qh, qs, at := 2, 6, 32
		if t == dtype.Q5_1 {
			qh, qs, at = 4, 8, 64
			copy(dst[2:], half(32))
		}
		copy(dst, half(0))
		var h uint32
		for p := range 4 {
			for k := range 4 {
				if maskBit(src[at+16*p:], lane, k) {
					h |= 1 << (4*p + k)
				}
				if maskBit(src[at+16*p+8:], lane, k) {
					h |= 1 << (16 + 4*p + k)
				}
			}
		}
		binary.LittleEndian.PutUint32(dst[qh:], h)
		deinterleave(dst[qs:], src[at+64:], lane, 16)
	case dtype.Q4_K, dtype.Q5_K:
		copy(dst, half(0))
		copy(dst[2:], half(32))
		var sc, m [8]uint8
		for j := range 8 {
			sc[j], m[j] = src[64+16*j+lane], src[kMinAt(j, lane)]
		}
		dtype.PackKScaleMin(dst[4:16], sc, m)
		codes, qs := 320, 16
		if t == dtype.Q5_K {
			codes, qs = 832, 48
			qh := dst[16:48]
			clear(qh)
			for i := range 4 {
				for p := range 8 {
					for k := range 4 {
						l := 4*p + k
						if maskBit(src[320+128*i+16*p:], lane, k) {
							qh[l] |= 1 << (2 * i)
						}
						if maskBit(src[320+128*i+16*p+8:], lane, k) {
							qh[l] |= 1 << (2*i + 1)
						}
					}
				}
			}
		}
		deinterleave(dst[qs:], src[codes:], lane, 128)
	case dtype.F8_E4M3_B128:
		s := math.Float32frombits(binary.LittleEndian.Uint32(src[4*lane:]))
		binary.LittleEndian.PutUint32(dst, math.Float32bits(s/(1<<8)))
		for c := range dst[4:] {
			dst[4+c] = src[64+16*c+lane]
		}
	case dtype.Q6_K:
		copy(dst[208:], half(0))
		for g := range 16 {
			dst[192+g] = src[q6ScaleAt(g, lane)]
		}
		for h := range 2 {
			for p := range 8 {
				at := 288 + 1536*h + 192*p
				copy(dst[64*h+4*p:64*h+4*p+4], src[at+4*lane:])
				copy(dst[64*h+32+4*p:64*h+32+4*p+4], src[at+64+4*lane:])
				copy(dst[128+32*h+4*p:128+32*h+4*p+4], src[at+128+4*lane:])
			}
		}
	}
}
