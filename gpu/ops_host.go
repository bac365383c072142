package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/internal/kernels"
	"github.com/specula/specula/internal/vecmath"
)

// hostOps runs the primitive operations in plain Go on the CPU, one thread, with
// the CPU runtime's kernels where there is one (weight products, RMSNorm, SiLU), so
// that a Backend on it computes what model/llama computes. It defines what each CUDA
// kernel must compute, and lets the tests check the Backend without a GPU.
type hostOps struct {
	allocs [][]uint64 // allocation i is addressed by (i+1)<<allocShift
	act    kernels.Act
	tmp    []float32
	scores []float32
	row    []byte // an embedding row of llama.cpp's blocks
	// mats are the kernel matrices made of weight tensors (repacked, for the
	// quantised types), made once: forgotten when any memory is written or freed.
	mats map[wtensor]*kernels.Matrix
}

const allocShift = 40

// hostFault is the panic value of an address outside every allocation; the backend's
// methods turn it into an error.
type hostFault struct{ msg string }

// catch, deferred by every method that reads or writes memory, turns a panic into the
// method's error: a hostFault (a bad address, which on a GPU would be an illegal
// memory access) or any other (an index out of range in a plain-Go kernel), so that
// no panic escapes the backend.
func (h *hostOps) catch(op string, err *error) {
	if r := recover(); r != nil {
		if f, ok := r.(hostFault); ok {
			*err = fmt.Errorf("cuda: host device: %s: %s", op, f.msg)
			return
		}
		*err = fmt.Errorf("cuda: host device: %s: %v", op, r)
	}
}

func (h *hostOps) kind() string { return "host" }

func (h *hostOps) alloc(bytes int64) (devptr, error) {
	if bytes < 0 || bytes >= 1<<allocShift {
		return 0, fmt.Errorf("cuda: host device: cannot allocate %d bytes", bytes)
	}
	buf := make([]uint64, (bytes+7)/8)
	for i, a := range h.allocs {
		if a == nil {
			h.allocs[i] = buf
			return devptr(uint64(i+1) << allocShift), nil
		}
	}
	h.allocs = append(h.allocs, buf)
	return devptr(uint64(len(h.allocs)) << allocShift), nil
}

func (h *hostOps) free(p devptr) error {
	id := int(p>>allocShift) - 1
	if id < 0 || id >= len(h.allocs) || h.allocs[id] == nil || p&(1<<allocShift-1) != 0 {
		return fmt.Errorf("cuda: host device: free of %#x, which is no allocation", uint64(p))
	}
	h.allocs[id] = nil
	h.forget(p)
	return nil
}

// forget drops the matrices made of the allocation holding p, which is being written
// or freed.
func (h *hostOps) forget(p devptr) {
	for w := range h.mats {
		if w.p>>allocShift == p>>allocShift {
			delete(h.mats, w)
		}
	}
}

// bytes returns the n bytes at p.
func (h *hostOps) bytes(p devptr, n int64) []byte {
	id := int(p>>allocShift) - 1
	off := int64(p & (1<<allocShift - 1))
	if id < 0 || id >= len(h.allocs) || h.allocs[id] == nil {
		panic(hostFault{fmt.Sprintf("address %#x is in no allocation", uint64(p))})
	}
	a := bytesOf(h.allocs[id])
	if n < 0 || off+n > int64(len(a)) {
		panic(hostFault{fmt.Sprintf("%d bytes at offset %d of an allocation of %d", n, off, len(a))})
	}
	return a[off : off+n]
}

func (h *hostOps) f32(p devptr, n int64) []float32 {
	if n == 0 {
		return nil
	}
	b := h.bytes(p, 4*n)
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
}

func (h *hostOps) i32(p devptr, n int64) []int32 {
	if n == 0 {
		return nil
	}
	b := h.bytes(p, 4*n)
	return unsafe.Slice((*int32)(unsafe.Pointer(&b[0])), n)
}

func (h *hostOps) upload(dst devptr, src []byte) (err error) {
	defer h.catch("upload", &err)
	h.forget(dst)
	copy(h.bytes(dst, int64(len(src))), src)
	return nil
}

func (h *hostOps) download(dst []byte, src devptr) (err error) {
	defer h.catch("download", &err)
	copy(dst, h.bytes(src, int64(len(dst))))
	return nil
}

// mix64 is the SplitMix64 finaliser, as in the fill kernel.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// fillValue is value k of a fill, as the fill kernel computes it.
func fillValue(seed uint64, k int64, scale, offset float32) float32 {
	z := mix64(seed*0x9e3779b97f4a7c15 + uint64(k))
	u := float32(z>>40)*(1.0/8388608.0) - 1
	return offset + scale*u
}

func (h *hostOps) fill(p devptr, typ dtype.DType, n int64, seed uint64, scale, offset float32) (err error) {
	h.forget(p)
	defer h.catch("fill", &err)
	switch typ {
	case dtype.F32:
		out := h.f32(p, n)
		for k := range out {
			out[k] = fillValue(seed, int64(k), scale, offset)
		}
	case dtype.F16, dtype.BF16:
		out := h.bytes(p, 2*n)
		for k := int64(0); k < n; k++ {
			v := fillValue(seed, k, scale, offset)
			bits := dtype.F32ToF16(v)
			if typ == dtype.BF16 {
				bits = dtype.F32ToBF16(v)
			}
			binary.LittleEndian.PutUint16(out[2*k:], bits)
		}
	case dtype.Q8_0:
		// Blocks of 32 values quantised as dtype.QuantizeQ8_0 does (and the
		// fill_q8_0 kernel): the same values as an F32 fill, then rounded.
		if n%32 != 0 {
			return fmt.Errorf("cuda: Q8_0 fill of %d values, not a multiple of 32", n)
		}
		out := h.bytes(p, n/32*34)
		var blk [32]float32
		for b := int64(0); b < n/32; b++ {
			for j := range blk {
				blk[j] = fillValue(seed, 32*b+int64(j), scale, offset)
			}
			dtype.QuantizeQ8_0(blk[:], out[34*b:34*(b+1)])
		}
	default:
		return fmt.Errorf("cuda: fill of type %s is not supported", typ)
	}
	return nil
}

// matrix wraps a weight tensor for the CPU kernels.
func (h *hostOps) matrix(w wtensor) (*kernels.Matrix, error) {
	if m, ok := h.mats[w]; ok {
		return m, nil
	}
	m, err := kernels.NewMatrix(w.typ, w.rows, w.cols, h.bytes(w.p, w.rowBytes()*int64(w.rows)))
	if err != nil {
		return nil, err
	}
	if h.mats == nil {
		h.mats = map[wtensor]*kernels.Matrix{}
	}
	h.mats[w] = m
	return m, nil
}

func (h *hostOps) embed(out devptr, w wtensor, tokens devptr, n int) (err error) {
	defer h.catch("embed", &err)
	m, err := h.matrix(w)
	if err != nil {
		return err
	}
	o := h.f32(out, int64(n*w.cols))
	if len(h.row) < m.RowBytes() {
		h.row = make([]byte, m.RowBytes())
	}
	for i, t := range h.i32(tokens, int64(n)) {
		if err := m.RowF32(int(t), o[i*w.cols:(i+1)*w.cols], h.row); err != nil {
			return fmt.Errorf("cuda: embedding of token %d: %w", t, err)
		}
	}
	return nil
}

func (h *hostOps) rmsNorm(out, x, w, rows devptr, n, dim int, eps float32) (err error) {
	defer h.catch("rmsNorm", &err)
	wv := h.f32(w, int64(dim))
	o := h.f32(out, int64(n*dim))
	var idx []int32
	if rows != 0 {
		idx = h.i32(rows, int64(n))
	}
	for i := range n {
		r := i
		if idx != nil {
			r = int(idx[i])
		}
		src := h.f32(x+devptr(4*r*dim), int64(dim))
		kernels.RMSNorm(o[i*dim:(i+1)*dim], src, wv, eps)
	}
	return nil
}

func (h *hostOps) headNorm(x, w devptr, n, width, head0, heads, hd int, eps float32) (err error) {
	defer h.catch("headNorm", &err)
	wv := h.f32(w, int64(hd))
	rows := h.f32(x, int64(n*width))
	for r := range n {
		for k := head0; k < head0+heads; k++ {
			v := rows[r*width+k*hd : r*width+(k+1)*hd]
			kernels.RMSNorm(v, v, wv, eps)
		}
	}
	return nil
}

func (h *hostOps) matmul(out devptr, ldo int, x devptr, n int, w wtensor, accumulate bool) (err error) {
	defer h.catch("matmul", &err)
	m, err := h.matrix(w)
	if err != nil {
		return err
	}
	h.act.Reset(h.f32(x, int64(n*w.cols)), n, w.cols)
	if err := h.act.Prepare(w.typ); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	if cap(h.tmp) < n*w.rows {
		h.tmp = make([]float32, n*w.rows)
	}
	tmp := h.tmp[:n*w.rows]
	m.Mul(&h.act, tmp, w.rows, 0, w.rows)
	o := h.f32(out, int64((n-1)*ldo+w.rows))
	for t := range n {
		dst, src := o[t*ldo:t*ldo+w.rows], tmp[t*w.rows:(t+1)*w.rows]
		if accumulate {
			kernels.Add(dst, src)
		} else {
			copy(dst, src)
		}
	}
	return nil
}

func (h *hostOps) gather(out, x, perm devptr, n, cols int) (err error) {
	defer h.catch("gather", &err)
	total := int64(n) * int64(cols)
	kernels.Gather(h.f32(out, total), h.f32(x, total), h.i32(perm, int64(cols)))
	return nil
}

// off is the float offset of one head's vector of a slot in a block pool.
func (g kvGeom) off(slot int64, layer, kind, head int) int64 {
	bs := int64(g.blockSize)
	blk, so := slot/bs, slot%bs
	return ((((blk*int64(g.layers)+int64(layer))*2+int64(kind))*int64(g.kvHeads)+int64(head))*bs + so) * int64(g.headDim)
}

// pool returns the whole block pool of g as floats, given its size in blocks.
func (h *hostOps) pool(g kvGeom) []float32 {
	id := int(g.base>>allocShift) - 1
	if id < 0 || id >= len(h.allocs) || h.allocs[id] == nil {
		panic(hostFault{"key/value pool is no allocation"})
	}
	n := int64(len(h.allocs[id])*8) - int64(g.base&(1<<allocShift-1))
	return h.f32(g.base, n/4)
}

func (h *hostOps) qkv(a qkvArgs) (err error) {
	defer h.catch("qkv", &err)
	g := a.kv
	hd, heads, kvh := g.headDim, a.heads, g.kvHeads
	width := (heads + 2*kvh) * hd
	rows := h.f32(a.qkv, int64(a.n*width))
	var bias []float32
	if a.bias != 0 {
		bias = h.f32(a.bias, int64(width))
	}
	half := a.ropeDim / 2
	rope := h.f32(a.rope, int64(a.n*2*half))
	slots := h.i32(a.slots, int64(a.n))
	q := h.f32(a.q, int64(a.n*heads*hd))
	kv := h.pool(g)
	row := make([]float32, width)
	for i := range a.n {
		copy(row, rows[i*width:(i+1)*width])
		if bias != nil {
			kernels.Add(row, bias)
		}
		cs, sn := rope[i*2*half:i*2*half+half], rope[i*2*half+half:(i+1)*2*half]
		for hh := range heads + kvh {
			backend.Rope(row[hh*hd:(hh+1)*hd], cs, sn, backend.RopeStyle(a.style))
		}
		copy(q[i*heads*hd:(i+1)*heads*hd], row[:heads*hd])
		for kind := range 2 {
			for kh := range kvh {
				src := row[(heads+kind*kvh+kh)*hd : (heads+kind*kvh+kh+1)*hd]
				o := g.off(int64(slots[i]), a.layer, kind, kh)
				copy(kv[o:o+int64(hd)], src)
			}
		}
	}
	return nil
}

func (h *hostOps) attention(a attnArgs) (err error) {
	defer h.catch("attention", &err)
	g := a.kv
	hd, heads, kvh := g.headDim, a.heads, g.kvHeads
	group := heads / kvh
	q := h.f32(a.q, int64(a.n*heads*hd))
	out := h.f32(a.out, int64(a.n*heads*hd))
	prefix, exOff, exCnt := h.i32(a.prefix, int64(a.n)), h.i32(a.extraOff, int64(a.n)), h.i32(a.extraCnt, int64(a.n))
	kv := h.pool(g)
	bs := int64(g.blockSize)
	qs := make([]float32, hd)
	for i := range a.n {
		pre, cnt := int(prefix[i]), int(exCnt[i])
		L := pre + cnt
		lo := 0 // visible index j is position j: a window leaves out those before lo
		if a.window > 0 {
			lo = max(0, L-a.window)
		}
		var ex []int32
		if cnt > 0 {
			ex = h.i32(a.extras+devptr(4*exOff[i]), int64(cnt))
		}
		// The physical slot of each visible position.
		slot := func(j int) int64 {
			p := int64(j)
			if j >= pre {
				p = int64(a.base) + int64(ex[j-pre])
			}
			blk := h.i32(a.table+devptr(4*(p/bs)), 1)[0]
			return int64(blk)*bs + p%bs
		}
		if cap(h.scores) < L {
			h.scores = make([]float32, L)
		}
		sc := h.scores[:L]
		for hh := range heads {
			kh := hh / group
			for d := range hd {
				qs[d] = q[(i*heads+hh)*hd+d] * a.scale
			}
			mx := float32(math.Inf(-1))
			for j := lo; j < L; j++ {
				o := g.off(slot(j), a.layer, 0, kh)
				var s float32
				for d, k := range kv[o : o+int64(hd)] {
					s += qs[d] * k
				}
				sc[j] = s
				mx = max(mx, s)
			}
			inv := float32(1 / vecmath.ExpShifted(sc[lo:], mx, 1))
			dst := out[(i*heads+hh)*hd : (i*heads+hh+1)*hd]
			clear(dst)
			for j := lo; j < L; j++ {
				w := sc[j] * inv
				o := g.off(slot(j), a.layer, 1, kh)
				for d, v := range kv[o : o+int64(hd)] {
					dst[d] += w * v
				}
			}
		}
	}
	return nil
}

func (h *hostOps) glu(out, gu devptr, n, ffn int, act backend.Activation) (err error) {
	defer h.catch("glu", &err)
	f := kernels.SiLUMul
	if act == backend.GELUTanh {
		f = kernels.GELUMul
	}
	src := h.f32(gu, int64(n*2*ffn))
	dst := h.f32(out, int64(n*ffn))
	for t := range n {
		f(dst[t*ffn:(t+1)*ffn], src[t*2*ffn:t*2*ffn+ffn], src[t*2*ffn+ffn:(t+1)*2*ffn])
	}
	return nil
}

func (h *hostOps) scale(x devptr, total int64, s float32) (err error) {
	defer h.catch("scale", &err)
	vecmath.Scale(h.f32(x, total), s)
	return nil
}

func (h *hostOps) add(y, x devptr, total int64) (err error) {
	defer h.catch("add", &err)
	kernels.Add(h.f32(y, total), h.f32(x, total))
	return nil
}

func (h *hostOps) kvCopy(g kvGeom, pairs devptr, m int) (err error) {
	defer h.catch("kvCopy", &err)
	kv := h.pool(g)
	ps := h.i32(pairs, int64(2*m))
	hd := int64(g.headDim)
	for p := range m {
		dst, src := int64(ps[2*p]), int64(ps[2*p+1])
		for l := range g.layers {
			for kind := range 2 {
				for kh := range g.kvHeads {
					d, s := g.off(dst, l, kind, kh), g.off(src, l, kind, kh)
					copy(kv[d:d+hd], kv[s:s+hd])
				}
			}
		}
	}
	return nil
}

func (h *hostOps) sync() error  { return nil }
func (h *hostOps) close() error { h.allocs = nil; return nil }
