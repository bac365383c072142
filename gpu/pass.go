package gpu

import (
	"context"
	"errors"
	"fmt"

	"github.com/specula/specula/backend"
)

// devicePass is one pass on the device: the plan uploaded, the scratch sized, and the
// first error.
type devicePass struct {
	g    *Backend
	b    deviceOps
	plan *backend.Plan
	rows int
	err  error

	// Offsets, in int32s, of the plan's sections in the device copy.
	oTokens, oPrefix, oExOff, oExCnt, oExtras, oOuts, oStates int
	oSlots                                                    [2]int   // per pool
	finals                                                    int      // final states
	oTables                                                   [2][]int // per pool, per span
	ropeOff                                                   int64    // bytes
}

// Run implements [backend.Backend].
func (g *Backend) Run(ctx context.Context, p *backend.Plan, l backend.Layers) error {
	if g.kv[0] == nil && g.kv[1] == nil {
		return errors.New("cuda: the backend has no key/value cache (call KV first)")
	}
	if p.Rows() > g.opts.MaxBatch {
		return fmt.Errorf("cuda: a pass of %d rows; at most %d", p.Rows(), g.opts.MaxBatch)
	}
	return g.do(func(b deviceOps) error {
		ps := &g.pass // passes on one device run one at a time: one is enough
		*ps = devicePass{g: g, b: b, plan: p, rows: p.Rows(), oTables: [2][]int{ps.oTables[0][:0], ps.oTables[1][:0]}}
		if err := ps.upload(); err != nil {
			return err
		}
		err := l.Layers(ctx, ps)
		if ps.err != nil {
			return ps.err
		}
		return err
	})
}

// align4 rounds n up to a multiple of 4 (16 bytes of int32).
func align4(n int) int { return (n + 3) &^ 3 }

// upload sizes the scratch and copies the plan to the device in one upload: the int32
// sections, then the rotary table.
func (ps *devicePass) upload() error {
	p, g := ps.plan, ps.g
	n := ps.rows
	ints := g.s.ints[:0]
	section := func(vals []int32) int {
		at := len(ints)
		ints = append(ints, vals...)
		for len(ints)%4 != 0 {
			ints = append(ints, 0)
		}
		return at
	}
	ps.oTokens, ps.oPrefix = section(p.Tokens), section(p.Prefix)
	ps.oSlots = [2]int{section(p.Slots), section(p.SlidingSlots)}
	ps.oExOff = section(p.ExtraOff[:n])
	ps.oExCnt = len(ints)
	for r := range n {
		ints = append(ints, p.ExtraOff[r+1]-p.ExtraOff[r])
	}
	section(nil)
	ps.oExtras = section(p.Extra)
	for pool := range ps.oTables {
		ps.oTables[pool] = ps.oTables[pool][:0]
		for i := range p.Spans {
			ps.oTables[pool] = append(ps.oTables[pool], section(p.Spans[i].TableOf(pool)))
		}
	}
	ps.oOuts = len(ints)
	for _, o := range p.Outputs {
		ints = append(ints, int32(o.Row))
	}
	section(nil)
	ps.oStates, ps.finals = len(ints), 0
	for _, st := range p.States {
		if st.Layer == backend.FinalLayer {
			ints = append(ints, int32(st.Row))
			ps.finals++
		}
	}
	section(nil)
	g.s.ints = ints
	ps.ropeOff = int64(4 * len(ints))
	total := ps.ropeOff + int64(4*(len(p.Rope)+len(p.LocalRope)))
	if err := g.ensureScratch(ps.b, n, max(len(p.Outputs), ps.finals), total); err != nil {
		return err
	}
	st := grow(g.s.stage, int(total))
	g.s.stage = st
	copy(st, bytesOf(ints))
	copy(st[ps.ropeOff:], bytesOf(p.Rope))
	copy(st[ps.ropeOff+int64(4*len(p.Rope)):], bytesOf(p.LocalRope)) // Attention's local angles
	return ps.b.upload(g.s.meta, st)
}

// at is the device address of the int32 at offset off of the plan's copy.
func (ps *devicePass) at(off int) devptr { return ps.g.s.meta + devptr(4*off) }

func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// ensureScratch sizes the activation buffers for passes of up to rows rows and outs
// output rows, and the plan buffer for meta bytes.
func (g *Backend) ensureScratch(b deviceOps, rows, outs int, meta int64) error {
	s := &g.s
	realloc := func(p *devptr, bytes int64, what string) error {
		if *p != 0 {
			if err := b.free(*p); err != nil {
				return err
			}
			*p = 0
		}
		np, err := b.alloc(bytes)
		if err != nil {
			return fmt.Errorf("cuda: scratch buffer %s of %d bytes: %w", what, bytes, err)
		}
		*p = np
		return nil
	}
	if rows > s.rows {
		for a := range s.acts {
			if err := realloc(&s.acts[a], int64(rows)*4*int64(g.shape.Width(backend.Act(a))), fmt.Sprint("activation ", a)); err != nil {
				s.rows = 0
				return err
			}
		}
		if err := realloc(&s.q, int64(rows)*4*int64(g.shape.Width(backend.Att)), "q"); err != nil {
			s.rows = 0
			return err
		}
		s.rows = rows
	}
	if g.permuted && rows > s.permRows {
		widest := 0
		for a := range s.acts {
			widest = max(widest, g.shape.Width(backend.Act(a)))
		}
		if err := realloc(&s.perm, int64(rows)*4*int64(widest), "gathered input"); err != nil {
			s.permRows = 0
			return err
		}
		s.permRows = rows
	}
	if outs > s.outs {
		if err := realloc(&s.rows1, int64(outs)*4*int64(g.shape.Dim), "output rows"); err != nil {
			s.outs = 0
			return err
		}
		if err := realloc(&s.logits, int64(outs)*4*int64(g.shape.Vocab), "logits"); err != nil {
			s.outs = 0
			return err
		}
		s.outs = outs
	}
	if meta > s.metaBytes {
		size := max(meta, 64<<10)
		if err := realloc(&s.meta, size, "plan"); err != nil {
			s.metaBytes = 0
			return err
		}
		s.metaBytes = size
	}
	return nil
}

// fail records the pass's first error.
func (ps *devicePass) fail(err error) {
	if ps.err == nil && err != nil {
		ps.err = err
	}
}

// ok reports whether the pass goes on: no error so far, and the weight is this
// backend's.
func (ps *devicePass) ok(weightOK bool) bool {
	if ps.err == nil && !weightOK {
		ps.err = errForeign
	}
	return ps.err == nil
}

// buf is the device address of an activation buffer.
func (ps *devicePass) buf(a backend.Act) devptr { return ps.g.s.acts[a] }

// Embed implements [backend.Pass].
func (ps *devicePass) Embed(dst backend.Act, table backend.Matrix) {
	m, ok := table.(*dmatrix)
	if ps.ok(ok) && m.permuted() {
		ps.fail(errPermutedTable)
	}
	if ps.err == nil {
		ps.fail(ps.b.embed(ps.buf(dst), m.parts[0], ps.at(ps.oTokens), ps.rows))
	}
}

// Load implements [backend.Pass]: the input vectors are uploaded.
func (ps *devicePass) Load(dst backend.Act) {
	if !ps.ok(true) {
		return
	}
	in, err := ps.plan.InputRows()
	if err != nil {
		ps.fail(fmt.Errorf("cuda: %w", err))
		return
	}
	ps.fail(ps.b.upload(ps.buf(dst), bytesOf(in)))
}

// Save implements [backend.Pass]: X is copied back when a state asks for it.
func (ps *devicePass) Save(layer int) {
	if !ps.ok(true) {
		return
	}
	for _, st := range ps.plan.States {
		if st.Layer == layer {
			ps.saveRows(layer)
			return
		}
	}
}

// saveRows copies X back and the rows the states of layer ask for to their buffers.
func (ps *devicePass) saveRows(layer int) {
	x, err := ps.hostX()
	if err != nil {
		ps.fail(err)
		return
	}
	dim := ps.g.shape.Dim
	for _, st := range ps.plan.States {
		if st.Layer == layer {
			copy(st.Dst, x[st.Row*dim:(st.Row+1)*dim])
		}
	}
}

// hostX copies X back to the host.
func (ps *devicePass) hostX() ([]float32, error) {
	g := ps.g
	g.s.hostX = grow(g.s.hostX, ps.rows*g.shape.Dim)
	return g.s.hostX, ps.b.download(bytesOf(g.s.hostX), ps.buf(backend.X))
}

// optional reads an optional vector of this backend: its device pointer, 0 for none,
// false (the pass failed) for another backend's.
func (ps *devicePass) optional(w backend.Vector) (devptr, bool) {
	if w == nil {
		return 0, true
	}
	v, ok := w.(dvector)
	return v.p, ps.ok(ok)
}

// Norm implements [backend.Pass].
func (ps *devicePass) Norm(dst, src backend.Act, w backend.Vector) {
	v, ok := w.(dvector)
	if ps.ok(ok) {
		ps.fail(ps.b.rmsNorm(ps.buf(dst), ps.buf(src), v.p, 0, ps.rows, ps.g.shape.Dim, ps.g.shape.NormEps))
	}
}

// HeadNorm implements [backend.Pass].
func (ps *devicePass) HeadNorm(a backend.Act, head0, heads int, w backend.Vector) {
	v, ok := w.(dvector)
	if ps.ok(ok) {
		sh := ps.g.shape
		ps.fail(ps.b.headNorm(ps.buf(a), v.p, ps.rows, sh.Width(a), head0, heads, sh.HeadDim, sh.NormEps))
	}
}

// Mul implements [backend.Pass].
func (ps *devicePass) Mul(dst, src backend.Act, w backend.Matrix) { ps.project(dst, src, w, false) }

// MulAdd implements [backend.Pass].
func (ps *devicePass) MulAdd(dst, src backend.Act, w backend.Matrix) { ps.project(dst, src, w, true) }

// project multiplies src by the parts of w into their columns of dst.
func (ps *devicePass) project(dst, src backend.Act, w backend.Matrix, accumulate bool) {
	m, ok := w.(*dmatrix)
	if !ps.ok(ok) {
		return
	}
	ldo, cols := ps.g.shape.Width(dst), ps.g.shape.Width(src)
	ps.fail(multiply(ps.b, product{out: ps.buf(dst), ldo: ldo, x: ps.buf(src), gathered: ps.g.s.perm, n: ps.rows, cols: cols}, m, accumulate))
}

// product says where a product's rows are: the n input rows of cols values at x, the
// buffer gathered inputs go to, and the output rows, ldo values apart, at out.
type product struct {
	out         devptr
	ldo         int
	x, gathered devptr
	n, cols     int
}

// multiply writes (or adds, when accumulate) the product of p's rows with the parts
// of m to their columns of the output: for each column order of the parts, the input
// gathered into it once (one launch), then the products of the parts with that order.
func multiply(b deviceOps, p product, m *dmatrix, accumulate bool) error {
	for k, perm := range m.inputs {
		x := p.x
		if perm != 0 {
			x = p.gathered
			if err := b.gather(x, p.x, perm, p.n, p.cols); err != nil {
				return err
			}
		}
		for i, part := range m.parts {
			if m.input[i] != k {
				continue
			}
			if err := b.matmul(p.out+devptr(4*m.offs[i]), p.ldo, x, p.n, part, accumulate); err != nil {
				return err
			}
		}
	}
	return nil
}

// Attention implements [backend.Pass]: the biases, rotation and cache stores of every
// row in one launch, then attention sequence by sequence, each over its own block
// table.
func (ps *devicePass) Attention(layer int, a backend.Attn) {
	bp, ok := ps.optional(a.Bias)
	if !ok || ps.err != nil {
		return
	}
	s, g := &ps.g.shape, ps.g
	_, err := ps.plan.Rotation(a.Local)
	if err == nil {
		err = g.checkKV(ps.plan, layer, a.Window)
	}
	if err != nil {
		ps.fail(fmt.Errorf("cuda: %w", err))
		return
	}
	rope := g.s.meta + devptr(ps.ropeOff)
	if a.Local {
		rope += devptr(4 * len(ps.plan.Rope))
	}
	geom, index := g.layerKV(layer)
	pool := g.kvmap.Pool[layer]
	ps.fail(ps.b.qkv(qkvArgs{qkv: ps.buf(backend.QKV), bias: bp, rope: rope,
		slots: ps.at(ps.oSlots[pool]), q: g.s.q, n: ps.rows, heads: s.Heads, ropeDim: s.RopeDim, style: int(s.Style),
		layer: index, kv: geom}))
	qd := int64(s.Heads * s.HeadDim)
	p := ps.plan
	for i, sp := range p.Spans {
		if ps.err != nil {
			return
		}
		visible := 0
		for r := sp.Lo; r < sp.Hi; r++ {
			visible = max(visible, int(p.Prefix[r]+p.ExtraOff[r+1]-p.ExtraOff[r]))
		}
		off := devptr(4 * qd * int64(sp.Lo))
		ps.fail(ps.b.attention(attnArgs{q: g.s.q + off, out: ps.buf(backend.Att) + off, table: ps.at(ps.oTables[pool][i]),
			prefix: ps.at(ps.oPrefix + sp.Lo), extraOff: ps.at(ps.oExOff + sp.Lo), extraCnt: ps.at(ps.oExCnt + sp.Lo),
			extras: ps.at(ps.oExtras), n: sp.Hi - sp.Lo, heads: s.Heads, base: 0, layer: index, maxVisible: visible,
			scale: a.ScoreScale(s.HeadDim), window: a.Window, kv: geom}))
	}
}

// GLU implements [backend.Pass].
func (ps *devicePass) GLU(act backend.Activation) {
	if ps.err != nil {
		return
	}
	if act != backend.SiLU && act != backend.GELUTanh {
		ps.fail(fmt.Errorf("cuda: activation %v is not supported", act))
		return
	}
	ps.fail(ps.b.glu(ps.buf(backend.Hidden), ps.buf(backend.GateUp), ps.rows, ps.g.shape.FFN, act))
}

// Scale implements [backend.Pass].
func (ps *devicePass) Scale(a backend.Act, s float32) {
	if ps.err == nil {
		ps.fail(ps.b.scale(ps.buf(a), int64(ps.rows)*int64(ps.g.shape.Width(a)), s))
	}
}

// Add implements [backend.Pass].
func (ps *devicePass) Add(dst, src backend.Act) {
	if ps.err != nil {
		return
	}
	sh := ps.g.shape
	if sh.Width(dst) != sh.Width(src) {
		ps.fail(fmt.Errorf("cuda: adding rows of %d values to rows of %d", sh.Width(src), sh.Width(dst)))
		return
	}
	ps.fail(ps.b.add(ps.buf(dst), ps.buf(src), int64(ps.rows)*int64(sh.Width(dst))))
}

// Final implements [backend.Pass]: the output and state rows normalised on the device
// (or, without a norm, gathered through the host), the states copied back, the logits
// multiplied on the device and copied to their buffers.
func (ps *devicePass) Final(w backend.Vector, out backend.Matrix) {
	norm, ok := ps.optional(w)
	if !ok {
		return
	}
	m, ok := out.(*dmatrix)
	if !ps.ok(ok) {
		return
	}
	if m.permuted() {
		ps.fail(errors.New("cuda: an output matrix with its columns permuted"))
		return
	}
	if ps.finals > 0 {
		ps.finalStates(norm)
	}
	outs := ps.plan.Outputs
	if ps.err != nil || len(outs) == 0 {
		return
	}
	ps.fail(ps.gather(norm, ps.oOuts, len(outs), func(k int) int { return outs[k].Row }))
	g, b := ps.g, ps.b
	vocab := m.rows
	for i, part := range m.parts {
		if ps.err != nil {
			return
		}
		ps.fail(b.matmul(g.s.logits+devptr(4*m.offs[i]), vocab, g.s.rows1, len(outs), part, false))
	}
	if ps.err != nil {
		return
	}
	st := grow(g.s.logitStage, len(outs)*vocab)
	g.s.logitStage = st
	if err := b.download(bytesOf(st), g.s.logits); err != nil {
		ps.fail(err)
		return
	}
	for k, o := range outs {
		copy(o.Logits[o.Index*vocab:(o.Index+1)*vocab], st[k*vocab:(k+1)*vocab])
	}
}

// gather writes the n rows of X named at offset off of the plan's copy (row(k) on the
// host), normalised with norm (0: as they are), to the output-row buffer.
func (ps *devicePass) gather(norm devptr, off, n int, row func(k int) int) error {
	g := ps.g
	dim := g.shape.Dim
	if norm != 0 {
		return ps.b.rmsNorm(g.s.rows1, ps.buf(backend.X), norm, ps.at(off), n, dim, g.shape.NormEps)
	}
	x, err := ps.hostX()
	if err != nil {
		return err
	}
	g.s.gathered = grow(g.s.gathered, n*dim)
	for k := range n {
		copy(g.s.gathered[k*dim:(k+1)*dim], x[row(k)*dim:(row(k)+1)*dim])
	}
	return ps.b.upload(g.s.rows1, bytesOf(g.s.gathered))
}

// finalStates writes the final states: the rows gathered, copied back.
func (ps *devicePass) finalStates(norm devptr) {
	g0 := ps.g
	rows := g0.s.stateRows[:0]
	for _, st := range ps.plan.States {
		if st.Layer == backend.FinalLayer {
			rows = append(rows, st.Row)
		}
	}
	g0.s.stateRows = rows
	if err := ps.gather(norm, ps.oStates, len(rows), func(k int) int { return rows[k] }); err != nil {
		ps.fail(err)
		return
	}
	g := ps.g
	dim := g.shape.Dim
	g.s.gathered = grow(g.s.gathered, len(rows)*dim)
	if err := ps.b.download(bytesOf(g.s.gathered), g.s.rows1); err != nil {
		ps.fail(err)
		return
	}
	k := 0
	for _, st := range ps.plan.States {
		if st.Layer == backend.FinalLayer {
			copy(st.Dst, g.s.gathered[k*dim:(k+1)*dim])
			k++
		}
	}
}
