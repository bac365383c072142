package cpu

import (
	"errors"
	"fmt"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/internal/kernels"
	"github.com/specula/specula/internal/vecmath"
)

// pass is one pass's scratch and state: the activation buffers, grown when a larger
// pass comes, and the first error.
type pass struct {
	b    *Backend
	plan *backend.Plan
	rows int
	err  error

	cap  int            // rows the buffers hold
	acts [6][]float32   // by backend.Act
	tmp  []float32      // MulAdd's product before it is added
	act  [6]kernels.Act // the activations of each buffer, prepared for products
	// gathered holds a product's input rows in the column orders of its parts
	// (matrix.inputs), and gact their preparation.
	gathered [kernels.MaxParts][]float32
	gact     [kernels.MaxParts]kernels.Act
	out      []float32      // normalised output rows
	logits   []float32      // logits rows that do not go straight to one buffer
	rowBuf   []byte         // an embedding row of llama.cpp's blocks
	scores   chan []float32 // attention score buffers, one per thread at work

	mul  kernels.Product
	attn attnTask
	glu  gluTask
}

// start readies the pass for plan p.
func (ps *pass) start(p *backend.Plan) {
	ps.plan, ps.rows, ps.err = p, p.Rows(), nil
	if ps.rows <= ps.cap {
		return
	}
	ps.cap = ps.rows
	for a := range ps.acts {
		ps.acts[a] = make([]float32, ps.rows*ps.b.shape.Width(backend.Act(a)))
	}
	ps.tmp = make([]float32, ps.rows*ps.b.shape.Dim)
}

// buf returns the rows of an activation buffer.
func (ps *pass) buf(a backend.Act) []float32 { return ps.acts[a][:ps.rows*ps.b.shape.Width(a)] }

// fail records the pass's first error.
func (ps *pass) fail(err error) {
	if ps.err == nil {
		ps.err = err
	}
}

// Embed implements [backend.Pass].
func (ps *pass) Embed(dst backend.Act, table backend.Matrix) {
	m, ok := table.(*matrix)
	if ps.err != nil || !ps.check(ok) {
		return
	}
	if m.permuted() {
		ps.fail(errPermutedTable)
		return
	}
	w := m.parts[0]
	dim := ps.b.shape.Dim
	x := ps.buf(dst)
	ps.rowBuf = grow(ps.rowBuf, w.RowBytes())
	for r, t := range ps.plan.Tokens {
		if err := w.RowF32(int(t), x[r*dim:(r+1)*dim], ps.rowBuf); err != nil {
			ps.fail(fmt.Errorf("cpu: embedding of token %d: %w", t, err))
			return
		}
	}
}

// Load implements [backend.Pass].
func (ps *pass) Load(dst backend.Act) {
	if ps.err != nil {
		return
	}
	in, err := ps.plan.InputRows()
	if err != nil {
		ps.fail(fmt.Errorf("cpu: %w", err))
		return
	}
	copy(ps.buf(dst), in)
}

// Save implements [backend.Pass].
func (ps *pass) Save(layer int) {
	if ps.err != nil {
		return
	}
	dim := ps.b.shape.Dim
	x := ps.buf(backend.X)
	for _, st := range ps.plan.States {
		if st.Layer == layer {
			copy(st.Dst, x[st.Row*dim:(st.Row+1)*dim])
		}
	}
}

// check fails the pass when a weight is not one of this backend's.
func (ps *pass) check(ok bool) bool {
	if !ok {
		ps.fail(errForeign)
	}
	return ok
}

// optional reads an optional vector of this backend: the zero vector for none, false
// (the pass failed) for another backend's.
func (ps *pass) optional(w backend.Vector) (vector, bool) {
	if w == nil {
		return nil, true
	}
	v, ok := w.(vector)
	return v, ps.check(ok)
}

// Norm implements [backend.Pass].
func (ps *pass) Norm(dst, src backend.Act, w backend.Vector) {
	v, ok := w.(vector)
	if ps.err != nil || !ps.check(ok) {
		return
	}
	d, s := ps.buf(dst), ps.buf(src)
	n := ps.b.shape.Dim
	for r := range ps.rows {
		kernels.RMSNorm(d[r*n:(r+1)*n], s[r*n:(r+1)*n], v, ps.b.shape.NormEps)
	}
}

// HeadNorm implements [backend.Pass].
func (ps *pass) HeadNorm(a backend.Act, head0, heads int, w backend.Vector) {
	v, ok := w.(vector)
	if ps.err != nil || !ps.check(ok) {
		return
	}
	sh := ps.b.shape
	buf, width, hd := ps.buf(a), sh.Width(a), sh.HeadDim
	for r := range ps.rows {
		for h := head0; h < head0+heads; h++ {
			x := buf[r*width+h*hd : r*width+(h+1)*hd]
			kernels.RMSNorm(x, x, v, sh.NormEps)
		}
	}
}

// Mul implements [backend.Pass].
func (ps *pass) Mul(dst, src backend.Act, w backend.Matrix) {
	m, ok := w.(*matrix)
	if ps.err != nil || !ps.check(ok) {
		return
	}
	ps.mulInto(ps.buf(dst), ps.b.shape.Width(dst), src, m)
}

// MulAdd implements [backend.Pass].
func (ps *pass) MulAdd(dst, src backend.Act, w backend.Matrix) {
	m, ok := w.(*matrix)
	if ps.err != nil || !ps.check(ok) {
		return
	}
	if cap(ps.tmp) < ps.rows*m.rows {
		// A product wider than the residual stream (an EAGLE-3 head adds its two
		// halves of q, k and v): the product's buffer grows once, for this pass size.
		ps.tmp = make([]float32, ps.cap*m.rows)
	}
	tmp := ps.tmp[:ps.rows*m.rows]
	ps.mulInto(tmp, m.rows, src, m)
	kernels.Add(ps.buf(dst), tmp)
}

// mulInto computes y = src · mᵀ with rows of ldy values, every part in one parallel
// run.
func (ps *pass) mulInto(y []float32, ldy int, src backend.Act, m *matrix) {
	ps.mulRows(y, ldy, ps.buf(src), ps.rows, ps.b.shape.Width(src), &ps.act[src], m)
}

// mulRows computes y = x · mᵀ for n rows of x of cols values, prepared in act; a
// part whose columns are permuted reads x gathered into their order, once for every
// part with that order, before the rows are quantized.
func (ps *pass) mulRows(y []float32, ldy int, x []float32, n, cols int, act *kernels.Act, m *matrix) {
	var ins [kernels.MaxParts]*kernels.Act
	for k, perm := range m.inputs {
		if perm == nil {
			act.Reset(x, n, cols)
			ins[k] = act
			continue
		}
		g := grow(ps.gathered[k], n*cols)
		ps.gathered[k] = g
		kernels.Gather(g, x[:n*cols], perm)
		ps.gact[k].Reset(g, n, cols)
		ins[k] = &ps.gact[k]
	}
	var acts [kernels.MaxParts]*kernels.Act
	for i, in := range m.input {
		acts[i] = ins[in]
	}
	if err := ps.mul.Compute(ps.b.pool.k, acts[:len(m.parts)], y, ldy, m.parts, m.offs); err != nil {
		ps.fail(fmt.Errorf("cpu: %w", err))
	}
}

// GLU implements [backend.Pass].
func (ps *pass) GLU(act backend.Activation) {
	if ps.err != nil {
		return
	}
	var f func(dst, gate, up []float32)
	switch act {
	case backend.SiLU:
		f = kernels.SiLUMul
	case backend.GELUTanh:
		f = kernels.GELUMul
	default:
		ps.fail(fmt.Errorf("cpu: activation %v is not supported", act))
		return
	}
	ps.glu = gluTask{gu: ps.buf(backend.GateUp), h: ps.buf(backend.Hidden), ffn: ps.b.shape.FFN, f: f}
	ps.b.pool.k.Run(&ps.glu, ps.rows*ps.glu.chunks(), 1)
}

// Scale implements [backend.Pass].
func (ps *pass) Scale(a backend.Act, s float32) {
	if ps.err == nil {
		vecmath.Scale(ps.buf(a), s)
	}
}

// Add implements [backend.Pass].
func (ps *pass) Add(dst, src backend.Act) {
	if ps.err != nil {
		return
	}
	if w := ps.b.shape.Width(dst); w != ps.b.shape.Width(src) {
		ps.fail(fmt.Errorf("cpu: adding rows of %d values to rows of %d", ps.b.shape.Width(src), w))
		return
	}
	kernels.Add(ps.buf(dst), ps.buf(src))
}

// Final implements [backend.Pass].
func (ps *pass) Final(w backend.Vector, out backend.Matrix) {
	norm, ok := ps.optional(w)
	if !ok {
		return
	}
	m, ok := out.(*matrix)
	if ps.err != nil || !ps.check(ok) {
		return
	}
	if m.permuted() {
		ps.fail(errors.New("cpu: an output matrix with its columns permuted"))
		return
	}
	dim := ps.b.shape.Dim
	for _, st := range ps.plan.States {
		if st.Layer == backend.FinalLayer {
			ps.normRow(st.Dst, st.Row, norm)
		}
	}
	outs := ps.plan.Outputs
	if len(outs) == 0 {
		return
	}
	ps.out = grow(ps.out, len(outs)*dim)
	for k, o := range outs {
		ps.normRow(ps.out[k*dim:(k+1)*dim], o.Row, norm)
	}
	vocab := m.rows
	act := &ps.act[backend.XN] // its rows are no longer needed
	if direct := consecutive(outs); direct != nil {
		ps.mulRows(direct[outs[0].Index*vocab:], vocab, ps.out, len(outs), dim, act, m)
		return
	}
	ps.logits = grow(ps.logits, len(outs)*vocab)
	ps.mulRows(ps.logits, vocab, ps.out, len(outs), dim, act, m)
	for k, o := range outs {
		copy(o.Logits[o.Index*vocab:(o.Index+1)*vocab], ps.logits[k*vocab:(k+1)*vocab])
	}
}

// normRow writes row r of X, normalised with w (nil: as it is), to dst.
func (ps *pass) normRow(dst []float32, r int, w vector) {
	dim := ps.b.shape.Dim
	x := ps.buf(backend.X)[r*dim : (r+1)*dim]
	if w == nil {
		copy(dst, x)
		return
	}
	kernels.RMSNorm(dst, x, w, ps.b.shape.NormEps)
}

// consecutive returns the buffer that every output writes to, in order and row after
// row, or nil when they do not.
func consecutive(outs []backend.Output) []float32 {
	first := outs[0]
	for k, o := range outs {
		if o.Index != first.Index+k || len(o.Logits) == 0 || &o.Logits[0] != &first.Logits[0] {
			return nil
		}
	}
	return first.Logits
}

func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// gluChunk is how many elements of a row one GLU item takes.
const gluChunk = 4096

// gluTask computes h ← act(gate)·up, by f, for chunks of rows, gate and up side by
// side in each row of gu.
type gluTask struct {
	gu, h []float32
	ffn   int
	f     func(dst, gate, up []float32)
}

// chunks is the number of items per row.
func (t *gluTask) chunks() int { return (t.ffn + gluChunk - 1) / gluChunk }

// Run implements kernels.Task.
func (t *gluTask) Run(lo, hi int) {
	per := t.chunks()
	for it := lo; it < hi; it++ {
		r, c := it/per, it%per*gluChunk
		e := min(t.ffn, c+gluChunk)
		row := t.gu[r*2*t.ffn:]
		t.f(t.h[r*t.ffn+c:r*t.ffn+e], row[c:e], row[t.ffn+c:t.ffn+e])
	}
}
