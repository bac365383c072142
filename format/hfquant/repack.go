package hfquant

import (
	"cmp"
	"encoding/binary"
	"math"
	"slices"

	"github.com/specula/specula/format/dtype"
)

// intLayer is an integer-coded layer as the formats define its value: W[o][i] =
// codes[o][i] · scales[o][gidx[i]], where a code is the stored integer minus its zero
// point (and, for compressed-tensors, minus its offset 2^(bits−1)).
type intLayer struct {
	rows, cols, groups int
	codes              []int32   // rows × cols, q − z
	scales             []float32 // rows × groups
	gidx               []int64   // the group of each input
	stored             int64     // bytes of the stored tensors
}

// runGroups returns the groups of n inputs in runs of g: input i is in group i/g.
func runGroups(n, g int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i / g)
	}
	return out
}

// dense returns the layer's values, each the float32 product of its code and its
// scale: exact for float16 and bfloat16 scales (a code has at most 9 significant bits).
func (l intLayer) dense() Matrix {
	w := make([]float32, len(l.codes))
	for o := range l.rows {
		for i := range l.cols {
			w[o*l.cols+i] = float32(l.codes[o*l.cols+i]) * l.scales[o*l.groups+int(l.gidx[i])]
		}
	}
	return Matrix{Rows: l.rows, Cols: l.cols, Data: w, Stored: l.stored}
}

// Packed returns the linear layer prefix as llama.cpp's Q4_0 or Q8_0 blocks, or
// specula's Q4_Z128 or Q4_Z (rows × cols values, row-major, 128 or 32 values a
// block), when one of them holds it exactly, so that it runs on the integer kernels;
// ok is false when none does (the caller falls back to Dense). An FP8 layer, whose
// e4m3 values share no integer grid, comes as dtype.F8_E4M3_B128 (see fp8Weights.pack
// for when), whose float kernels compute with exactly its values.
//
// The repacking is exact because both sides compute the same product: a block's value
// is float32(c) · d with c an integer (Q8_0: the int8 code; Q4_0: the nibble minus 8;
// Q4_Z128 and Q4_Z: the nibble minus the block's zero) and d a float16 scale, and the
// format's value is float32(q − z) · s. So the layer fits when every run of 32
// consecutive inputs of a row lies in one group (group sizes that are multiples of
// 32, or one group per row), each scale s converts to float16 and back unchanged
// (d = s), and every q − z fits the block's codes: [−8, 7] for Q4_0 (GPTQ and
// compressed-tensors symmetric 4-bit, whose zero is 8); else for Q4_Z128, when every
// run of 128 inputs lies in one group (group sizes that are multiples of 128, or one
// per row) and every block of 128 has some zero z' in [0, 15] with every
// q − z + z' in [0, 15] (asymmetric 4-bit, AWQ and GPTQ of group size 128, whose q
// and z are nibbles: z' = z serves, and the packer takes the smallest,
// max(0, −min(q − z)), the value depending only on q − z); else Q4_Z, the same per
// 32 inputs; else [−128, 127] for Q8_0 (8-bit symmetric, and 4-bit GPTQ whose
// original format stores a zero 15 for z = 16, giving q − z = −16). An act-order
// layer (GPTQ desc_act: a g_idx whose groups are scattered over the inputs) has its
// inputs sorted by group first, as exllama does: Packing.Perm says which input each
// column multiplies, and the product gathers the activations into that order. Then
// dtype.Dequantize of the bytes, its columns put back in input order, equals Dense's
// values bit for bit; the kernels still round activations to 8 bits.
func (s *Scheme) Packed(src Source, prefix string) (Packing, bool, error) {
	l, err := s.read(src, prefix)
	if err != nil {
		return Packing{}, false, err
	}
	p, ok := l.packing()
	return p, ok, nil
}

// decoded is a linear layer decoded once from its stored tensors: its exact packing,
// where a type holds it, and its dense values.
type decoded interface {
	packing() (Packing, bool)
	dense() Matrix
}

// read decodes the linear layer prefix once.
func (s *Scheme) read(src Source, prefix string) (decoded, error) {
	if s.Method == FP8 {
		r := &reader{src: src, prefix: prefix}
		l := s.fp8(r)
		return l, r.err
	}
	return s.integer(src, prefix)
}

// Load returns the linear layer prefix as a loader takes it in, each layer decoded
// once: repacked where a type holds it exactly ([Scheme.Packed]: Q4_0, Q4_Z128, Q4_Z or
// Q8_0
// for the integer formats, act-order layers with their Perm; F8_E4M3_B128 for FP8),
// else its dense float32 values ([Scheme.Dense]) as F32, in input order (Perm nil).
func (s *Scheme) Load(src Source, prefix string) (Packing, error) {
	l, err := s.read(src, prefix)
	if err != nil {
		return Packing{}, err
	}
	if p, ok := l.packing(); ok {
		return p, nil
	}
	m := l.dense()
	data, err := dtype.Encode(dtype.F32, m.Data)
	if err != nil {
		return Packing{}, err
	}
	return Packing{Type: dtype.F32, Data: data, Rows: m.Rows, Cols: m.Cols, Stored: m.Stored}, nil
}

// Packing is a layer repacked by [Scheme.Packed] (or given by [Scheme.Load]): Rows ×
// Cols values as Type's blocks, row-major, whose values are exactly the layer's
// dense values, their columns in the order Perm gives.
type Packing struct {
	// Type is dtype.Q4_0, dtype.Q4_Z128, dtype.Q4_Z, dtype.Q8_0 or
	// dtype.F8_E4M3_B128 (from Load, also dtype.F32).
	Type dtype.DType
	// Data is the blocks of Type, row-major, in dtype.Dequantize's layout.
	Data       []byte
	Rows, Cols int
	// Perm is the input each column multiplies: column j of Data holds the weights
	// of input Perm[j], so that y = W·x is Data's product with x'[j] = x[Perm[j]].
	// It is set for an act-order layer (its inputs sorted by group, stably, so that
	// each group's inputs lie together in ascending order); nil means the identity.
	Perm []int32
	// Stored is the bytes of the stored tensors it was made from.
	Stored int64
}

// packing is the layer's exact Q4_0, Q4_Z128, Q4_Z or Q8_0 packing (see Packed): as it
// is when every run of 32 inputs lies in one group, else with its inputs sorted by
// group.
func (l intLayer) packing() (Packing, bool) {
	var perm []int32
	if _, ok := l.blockGroups(32); !ok && l.cols%32 == 0 {
		l, perm = l.sortedByGroup()
	}
	t, data, ok := l.pack()
	if !ok {
		return Packing{}, false
	}
	return Packing{Type: t, Data: data, Rows: l.rows, Cols: l.cols, Perm: perm, Stored: l.stored}, true
}

// sortedByGroup returns the layer with its inputs reordered by group, stably (inputs
// of one group in ascending order), and the permutation: column j of the result is
// input perm[j]. perm is nil when the order does not change.
func (l intLayer) sortedByGroup() (intLayer, []int32) {
	perm := make([]int32, l.cols)
	for i := range perm {
		perm[i] = int32(i)
	}
	slices.SortStableFunc(perm, func(a, b int32) int { return cmp.Compare(l.gidx[a], l.gidx[b]) })
	identity := true
	for j, i := range perm {
		identity = identity && int(i) == j
	}
	if identity {
		return l, nil
	}
	out := l
	out.codes, out.gidx = make([]int32, len(l.codes)), make([]int64, l.cols)
	for j, i := range perm {
		out.gidx[j] = l.gidx[i]
	}
	for o := range l.rows {
		src, dst := l.codes[o*l.cols:(o+1)*l.cols], out.codes[o*l.cols:(o+1)*l.cols]
		for j, i := range perm {
			dst[j] = src[i]
		}
	}
	return out, perm
}

// pack encodes the layer as Q4_0, else Q4_Z128, else Q4_Z, else Q8_0, when exact
// (see Packed).
func (l intLayer) pack() (dtype.DType, []byte, bool) {
	blockGroups, ok := l.blockGroups(32)
	if !ok {
		return 0, nil, false
	}
	half, ok := l.halfScales()
	if !ok {
		return 0, nil, false
	}
	lo, hi := l.codeRange()
	if lo >= -8 && hi <= 7 {
		return dtype.Q4_0, l.encode(blockGroups, half, 18, putQ4), true
	}
	for _, t := range []dtype.DType{dtype.Q4_Z128, dtype.Q4_Z} {
		if data, ok := l.encodeZ(t, half); ok {
			return t, data, true
		}
	}
	if lo >= -128 && hi <= 127 {
		return dtype.Q8_0, l.encode(blockGroups, half, 34, putQ8), true
	}
	return 0, nil, false
}

// blockGroups returns the group of each run of n inputs, when the inputs of every run
// lie in one group.
func (l intLayer) blockGroups(n int) ([]int64, bool) {
	if l.cols%n != 0 {
		return nil, false
	}
	out := make([]int64, l.cols/n)
	for b := range out {
		out[b] = l.gidx[n*b]
		for _, g := range l.gidx[n*b : n*b+n] {
			if g != out[b] {
				return nil, false
			}
		}
	}
	return out, true
}

// halfScales returns the scales as float16 bits, when each converts back to itself.
func (l intLayer) halfScales() ([]uint16, bool) {
	out := make([]uint16, len(l.scales))
	for i, s := range l.scales {
		out[i] = dtype.F32ToF16(s)
		if math.Float32bits(dtype.F16ToF32(out[i])) != math.Float32bits(s) || s != s {
			return nil, false
		}
	}
	return out, true
}

// codeRange returns the smallest and largest code.
func (l intLayer) codeRange() (lo, hi int32) {
	lo, hi = math.MaxInt32, math.MinInt32
	for _, c := range l.codes {
		lo, hi = min(lo, c), max(hi, c)
	}
	return lo, hi
}

// encode writes the layer's blocks of size bytes each, the scale then put's codes.
func (l intLayer) encode(blockGroups []int64, half []uint16, size int, put func(dst []byte, c []int32)) []byte {
	nb := l.cols / 32
	out := make([]byte, l.rows*nb*size)
	for o := range l.rows {
		for b, g := range blockGroups {
			blk := out[(o*nb+b)*size : (o*nb+b+1)*size]
			binary.LittleEndian.PutUint16(blk, half[o*l.groups+int(g)])
			put(blk[2:], l.codes[o*l.cols+32*b:o*l.cols+32*b+32])
		}
	}
	return out
}

// putQ8 writes 32 codes as int8.
func putQ8(dst []byte, c []int32) {
	for j, v := range c {
		dst[j] = byte(int8(v))
	}
}

// putQ4 writes 32 codes in [−8, 7] as nibbles c + 8: code j low in byte j, code 16 + j
// high.
func putQ4(dst []byte, c []int32) {
	for j := range 16 {
		dst[j] = byte(c[j]+8) | byte(c[16+j]+8)<<4
	}
}

// q4zZero returns the zero of a Q4_Z or Q4_Z128 block of the codes c (q − z): the
// smallest z' in [0, 15] that puts every c + z' in [0, 15], if there is one.
func q4zZero(c []int32) (uint8, bool) {
	lo, hi := slices.Min(c), slices.Max(c)
	z := max(0, -lo)
	return uint8(z), z <= 15 && hi+z <= 15
}

// fitsZ reports whether every block of n codes of every row has a zero (q4zZero).
func (l intLayer) fitsZ(n int) bool {
	for b := 0; b < len(l.codes); b += n {
		if _, ok := q4zZero(l.codes[b : b+n]); !ok {
			return false
		}
	}
	return true
}

// encodeZ writes the layer's blocks of t (Q4_Z or Q4_Z128) when they hold it: every
// run of a block's inputs in one group, and every block with a zero. Each block is its group's scale,
// its zero (q4zZero) and the nibbles c + z.
func (l intLayer) encodeZ(t dtype.DType, half []uint16) ([]byte, bool) {
	n, size := t.BlockSize(), t.BlockBytes()
	blockGroups, ok := l.blockGroups(n)
	if !ok || !l.fitsZ(n) {
		return nil, false
	}
	encode := dtype.EncodeQ4_Z
	if t == dtype.Q4_Z128 {
		encode = dtype.EncodeQ4_Z128
	}
	nb := l.cols / n
	out := make([]byte, l.rows*nb*size)
	nib := make([]uint8, n)
	for o := range l.rows {
		for b, g := range blockGroups {
			c := l.codes[o*l.cols+n*b : o*l.cols+n*b+n]
			z, _ := q4zZero(c) // fitsZ: every block has one
			for j, v := range c {
				nib[j] = uint8(v + int32(z))
			}
			if encode(out[(o*nb+b)*size:], half[o*l.groups+int(g)], z, nib) != nil {
				return nil, false
			}
		}
	}
	return out, true
}
