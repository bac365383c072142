// Package kernels holds the CPU backend's numeric kernels: weight-matrix products for
// every supported weight type (whose encodings package format/dtype defines),
// activation packing and quantisation, vector helpers and a worker pool. Hot loops have AVX2 and AVX-512 assembly generated with avo (see
// _gen/); every assembly kernel has a pure-Go twin with the same signature that is
// used when the CPU lacks the features (or with the purego build tag), and that the
// tests compare the assembly against, every kernel to the bit. The kernels are chosen
// once, at start, by the CPU's features; the environment variable SPECULA_CPU caps
// them, for comparisons: avx512bw holds an AVX-512 VNNI machine to the AVX-512 integer
// kernels without VNNI, avx2 to the AVX2 kernels, generic to the pure-Go ones.
package kernels

import (
	"fmt"

	"github.com/specula/specula/format/dtype"
)

// Group is the largest number of activation rows a kernel processes against one read
// of a weight row. Batches of more rows are cut into groups.
const Group = 8

// Matrix is a weight matrix of Rows × Cols values of one type: row r holds the weights
// of output r, repacked in groups of 16 rows (see repack.go).
type Matrix struct {
	Type       dtype.DType
	Rows, Cols int
	// Data is the matrix's storage: its repacked row groups.
	Data     []byte
	rowBytes int // bytes of a row of llama.cpp's blocks
	blocks   int // blocks per row
	// mapped is the size of the anonymous mapping Data lies in (0: Data is on the Go
	// heap); see weightBytes.
	mapped int64
}

// Footprint is the memory the matrix's storage takes and where: the size of the
// anonymous mapping, outside the Go heap, that a large matrix's Data lies in (its
// length rounded up to whole huge pages: with transparent huge pages the tail of the
// last one is resident too), or, for a small one, its length on the Go heap.
func (m *Matrix) Footprint() (bytes int64, heap bool) {
	if m.mapped > 0 {
		return m.mapped, false
	}
	return int64(len(m.Data)), true
}

// NewMatrix checks that data holds rows × cols values of type t, row-major, and makes
// the matrix, a repacked copy of it.
func NewMatrix(t dtype.DType, rows, cols int, data []byte) (*Matrix, error) {
	if !Supported(t) {
		return nil, fmt.Errorf("kernels: weight type %s is not supported", t)
	}
	if rows <= 0 || cols <= 0 {
		return nil, fmt.Errorf("kernels: matrix of %d × %d", rows, cols)
	}
	rb, err := t.Bytes(int64(cols))
	if err != nil {
		return nil, fmt.Errorf("kernels: row of %d values: %w", cols, err)
	}
	if int64(len(data)) != rb*int64(rows) {
		return nil, fmt.Errorf("kernels: %d × %d %s needs %d bytes, have %d", rows, cols, t, rb*int64(rows), len(data))
	}
	if t == dtype.F8_E4M3_B128 {
		if err := dtype.CheckF8(data); err != nil {
			return nil, fmt.Errorf("kernels: %w", err)
		}
	}
	m := &Matrix{Type: t, Rows: rows, Cols: cols, rowBytes: int(rb), blocks: cols / t.BlockSize()}
	m.Data = repack(t, data, rows, int(rb), m)
	return m, nil
}

// Supported reports whether products with weights of type t are implemented.
func Supported(t dtype.DType) bool { return groupBlockBytes(t) != 0 }

// RowF32 decodes row r into dst (Cols values), as an embedding lookup does. The row
// is first laid out as llama.cpp's blocks in buf, which must hold RowBytes.
func (m *Matrix) RowF32(r int, dst []float32, buf []byte) error {
	unpackRow(m.Type, m.Data, m.blocks, r, buf[:m.rowBytes])
	return dtype.Dequantize(m.Type, buf[:m.rowBytes], dst[:m.Cols])
}

// RowBytes is the size of one row of llama.cpp's blocks: what RowF32 needs of buf.
func (m *Matrix) RowBytes() int { return m.rowBytes }

// Mul computes y[t*ldy + r] = W[r] · x[t] for the rows r in [r0, r1) and every
// activation row t of a. a must have been prepared for m.Type. Different row ranges
// may be computed concurrently; ranges that begin and end on multiples of RowGroup
// waste no work.
func (m *Matrix) Mul(a *Act, y []float32, ldy, r0, r1 int) {
	if isFloat(m.Type) {
		m.mulFloat(a, y, ldy, r0, r1)
		return
	}
	m.mulInt(a, y, ldy, r0, r1)
}

// isFloat reports whether products with weights of type t are float products (the
// float kernels, with the activations as they are): the float types and
// F8_E4M3_B128, whose e4m3 codes the kernels decode to float32 exactly.
func isFloat(t dtype.DType) bool { return t.BlockSize() == 1 || t == dtype.F8_E4M3_B128 }

// eachGroup calls f for every row group g of the rows [r0, r1) and every batch of up
// to Group activation rows from t0 on, with where the nt × 16 outputs go: straight to
// y when the range holds the whole group, else to a scratch buffer whose rows in the
// range are then copied to y.
func (m *Matrix) eachGroup(a *Act, y []float32, ldy, r0, r1 int, f func(g, t0, nt int, out []float32, ldo int)) {
	var scratch []float32 // the outputs of a group that is cut (rare: made when needed)
	for g := r0 / rowGroup; g*rowGroup < r1; g++ {
		lo, hi := max(r0, g*rowGroup), min(r1, (g+1)*rowGroup)
		whole := lo == g*rowGroup && hi == (g+1)*rowGroup && hi <= m.Rows
		for t0 := 0; t0 < a.n; t0 += Group {
			nt := min(Group, a.n-t0)
			if whole {
				f(g, t0, nt, y[t0*ldy+g*rowGroup:], ldy)
				continue
			}
			if scratch == nil {
				scratch = make([]float32, Group*rowGroup)
			}
			f(g, t0, nt, scratch, rowGroup)
			for t := range nt {
				copy(y[(t0+t)*ldy+lo:(t0+t)*ldy+hi], scratch[t*rowGroup+lo-g*rowGroup:t*rowGroup+hi-g*rowGroup])
			}
		}
	}
}

// mulFloat is Mul for float matrices: for each row group, the float kernels over every
// activation row, a few rows per call, while the group's weights stay in the cache.
func (m *Matrix) mulFloat(a *Act, y []float32, ldy, r0, r1 int) {
	kern := floatKernels(m.Type)
	step := kern.rows()
	gb := groupBlockBytes(m.Type)
	m.eachGroup(a, y, ldy, r0, r1, func(g, t0, nt int, out []float32, ldo int) {
		w := &m.Data[g*m.blocks*gb]
		for t1 := 0; t1 < nt; t1 += step {
			n := min(step, nt-t1)
			kern[n](w, m.Cols, &a.x[(t0+t1)*a.cols], 4*a.cols, &out[t1*ldo], ldo)
		}
	})
}

// chunkBytes is how many bytes of a group's blocks the integer products take at a
// time when a batch of Group activation rows takes several kernel calls (the AVX2 and
// BW kernels take 4 rows): the calls run over one chunk while it is in the L1 cache,
// then go on to the next, so that the weights keep streaming in at an even pace.
const chunkBytes = 4096

// mulInt is Mul for repacked matrices: for each row group in the range, chunk by
// chunk of its blocks, the integer kernels for every activation row, a few rows per
// call.
func (m *Matrix) mulInt(a *Act, y []float32, ldy, r0, r1 int) {
	per := m.Type.BlockSize()
	q := a.quant(per)
	kern := intKernels(m.Type)
	step := kern.rows()
	gb := groupBlockBytes(m.Type)
	blocks := m.blocks
	chunk := blocks
	if min(a.n, Group) > step {
		chunk = max(1, chunkBytes/gb)
	}
	m.eachGroup(a, y, ldy, r0, r1, func(g, t0, nt int, out []float32, ldo int) {
		for t := range nt {
			clear(out[t*ldo : t*ldo+rowGroup])
		}
		for b0 := 0; b0 < blocks; b0 += chunk {
			nb := min(chunk, blocks-b0)
			w := &m.Data[(g*blocks+b0)*gb]
			for t1 := 0; t1 < nt; t1 += step {
				n := min(step, nt-t1)
				t := t0 + t1
				kern[n](w, nb, &q.codes[t*a.cols+b0*per], a.cols, &q.side[(t*blocks+b0)*q.words], blocks*q.words, &out[t1*ldo], ldo)
			}
		}
	})
}

// RowGroup is the number of weight rows a product computes together (every weight
// type is repacked in groups of this many rows): row ranges given to Mul should begin
// and end on its multiples.
const RowGroup = rowGroup

// Act holds a batch of activation rows prepared for products: as they are for the
// float weight types; for the quantised types quantised to 8 bits per block of 32 or
// 256 values (see act8.go), row by row, so that a row's result does not depend on the
// batch around it. Prepare it once per input for each weight type that reads it; many
// matrices may then read it concurrently.
type Act struct {
	x               []float32
	n, cols         int
	q32, q128, q256 actQ
}

// quant is the activations quantised in blocks of per values (32, 128 or 256).
func (a *Act) quant(per int) *actQ {
	switch per {
	case kBlock:
		return &a.q256
	case z128Block:
		return &a.q128
	}
	return &a.q32
}

// Reset points a at n rows of cols values in x (row-major) and forgets any
// preparation. It keeps its buffers.
func (a *Act) Reset(x []float32, n, cols int) {
	a.x, a.n, a.cols = x[:n*cols], n, cols
	a.q32.ok, a.q128.ok, a.q256.ok = false, false, false
}

// N is the number of activation rows.
func (a *Act) N() int { return a.n }

// Prepare makes the representation that weights of type t read. It must not run
// concurrently with products on a.
func (a *Act) Prepare(t dtype.DType) error {
	if !Supported(t) {
		return fmt.Errorf("kernels: weight type %s is not supported", t)
	}
	block := t.BlockSize()
	if a.cols%block != 0 {
		return fmt.Errorf("kernels: %d columns are not a whole number of %s blocks", a.cols, t)
	}
	switch {
	case isFloat(t): // the float kernels read x as it is (F8_E4M3_B128's 128-value blocks too)
	case block == q8Block && !a.q32.ok:
		a.q32.quantize(a, q8Block)
	case block == z128Block && !a.q128.ok:
		a.q128.quantize(a, z128Block)
	case block == kBlock && !a.q256.ok:
		a.q256.quantize(a, kBlock)
	}
	return nil
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
