package llama

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/specula/specula/internal/kernels"
	"github.com/specula/specula/kvcache"
	"github.com/specula/specula/model"
)

// sequence is one request's state: its keys and values, and scratch memory reused by
// every forward pass (grown when a larger batch arrives).
type sequence struct {
	m      *Model
	kv     *kvcache.Seq
	closed bool

	cap      int // batch size the buffers hold
	depth    []int32
	anc      [][]int32 // per token of a tree batch: its ancestors' batch indices
	x, xn    []float32 // residual stream and its normalised copy, N × Dim
	q, k, v  []float32 // projections, N × Heads·HeadDim and N × KVHeads·HeadDim
	att      []float32 // attention output, N × Heads·HeadDim
	gate, up []float32 // N × FFN
	cos, sin []float32 // N × RopeDim/2
	actIn    kernels.Act
	actAtt   kernels.Act
	actFFN   kernels.Act
	mul      mulTask
	attn     attnTask
	silu     siluTask
	outRows  []float32
	rowBuf   []byte         // an embedding row of llama.cpp's blocks
	scores   chan []float32 // attention score buffers, one per thread at work
}

// scoreBuf takes a buffer of at least n floats for attention scores.
func (s *sequence) scoreBuf(n int) []float32 {
	select {
	case b := <-s.scores:
		if cap(b) >= n {
			return b[:n]
		}
	default:
	}
	return make([]float32, n, n+n/2)
}

// putScoreBuf returns a buffer for the next task to use.
func (s *sequence) putScoreBuf(b []float32) {
	select {
	case s.scores <- b:
	default:
	}
}

var errClosed = fmt.Errorf("llama: %w", model.ErrClosed)

func (s *sequence) Len() int { return s.kv.Len() }

func (s *sequence) Close() error {
	if s.closed {
		return errors.New("llama: sequence closed twice")
	}
	s.closed = true
	s.kv.Close()
	return nil
}

func (s *sequence) Truncate(n int) error {
	if s.closed {
		return errClosed
	}
	if n < 0 || n > s.kv.Len() {
		return fmt.Errorf("llama: truncate to %d outside [0, %d]", n, s.kv.Len())
	}
	if err := s.kv.Truncate(n); err != nil {
		return fmt.Errorf("llama: %w", err)
	}
	return nil
}

func (s *sequence) Retain(from int, keep []int32) error {
	if s.closed {
		return errClosed
	}
	if err := model.CheckRetain(from, keep, s.kv.Len()); err != nil {
		return fmt.Errorf("llama: %w", err)
	}
	if err := s.kv.Retain(from, keep); err != nil {
		return fmt.Errorf("llama: %w", err)
	}
	return nil
}

func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// reserve sizes the scratch buffers for a batch of n tokens.
func (s *sequence) reserve(n int) {
	c := &s.m.cfg
	if n <= s.cap {
		return
	}
	s.cap = n
	s.depth = grow(s.depth, n)
	s.x = grow(s.x, n*c.Dim)
	s.xn = grow(s.xn, n*c.Dim)
	s.q = grow(s.q, n*c.Heads*c.HeadDim)
	s.k = grow(s.k, n*c.KVHeads*c.HeadDim)
	s.v = grow(s.v, n*c.KVHeads*c.HeadDim)
	s.att = grow(s.att, n*c.Heads*c.HeadDim)
	s.gate = grow(s.gate, n*c.FFN)
	s.up = grow(s.up, n*c.FFN)
	s.cos = grow(s.cos, n*c.RopeDim/2)
	s.sin = grow(s.sin, n*c.RopeDim/2)
}

func (s *sequence) Forward(ctx context.Context, b model.Batch, logits []float32) error {
	if s.closed {
		return errClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("llama: forward: %w", err)
	}
	m := s.m
	c := &m.cfg
	base := s.kv.Len()
	if err := model.CheckBatch(b, base, c.Vocab, c.ContextLength, len(logits)); err != nil {
		return fmt.Errorf("llama: %w", err)
	}
	n := len(b.Tokens)
	if n == 0 {
		return nil
	}
	if err := s.kv.Grow(n); err != nil {
		if errors.Is(err, kvcache.ErrOutOfMemory) {
			return fmt.Errorf("llama: %w: %w", model.ErrOutOfMemory, err)
		}
		return fmt.Errorf("llama: %w", err)
	}
	s.reserve(n)
	if err := s.forward(ctx, b, base, logits); err != nil {
		_ = s.kv.Truncate(base)
		return err
	}
	return nil
}

func (s *sequence) forward(ctx context.Context, b model.Batch, base int, logits []float32) error {
	m := s.m
	c := &m.cfg
	n := len(b.Tokens)
	dim, hd := c.Dim, c.HeadDim

	// Positions: a token at depth d of the batch's tree sits at base+d.
	s.ancestors(b.Tree, n)
	half := c.RopeDim / 2
	for i := range n {
		p := float64(base + b.Tree.Depth(i))
		for j := range half {
			sin, cos := math.Sincos(p * m.invFreq[j])
			s.cos[i*half+j], s.sin[i*half+j] = float32(cos), float32(sin)
		}
	}

	x := s.x[:n*dim]
	s.rowBuf = grow(s.rowBuf, m.embed.RowBytes())
	for i, t := range b.Tokens {
		if err := m.embed.RowF32(int(t), x[i*dim:(i+1)*dim], s.rowBuf); err != nil {
			return fmt.Errorf("llama: embedding of token %d: %w", t, err)
		}
	}
	qd, kvd := c.Heads*hd, c.KVHeads*hd
	xn := s.xn[:n*dim]
	for l := range m.layers {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("llama: forward: %w", err)
		}
		ly := &m.layers[l]
		for i := range n {
			kernels.RMSNorm(xn[i*dim:(i+1)*dim], x[i*dim:(i+1)*dim], ly.attnNorm, c.NormEps)
		}
		q, k, v := s.q[:n*qd], s.k[:n*kvd], s.v[:n*kvd]
		if err := s.matmul(&s.actIn, xn, n, dim, []*kernels.Matrix{ly.wq, ly.wk, ly.wv}, [][]float32{q, k, v}); err != nil {
			return err
		}
		if ly.bq != nil {
			for i := range n {
				kernels.Add(q[i*qd:(i+1)*qd], ly.bq)
				kernels.Add(k[i*kvd:(i+1)*kvd], ly.bk)
				kernels.Add(v[i*kvd:(i+1)*kvd], ly.bv)
			}
		}
		for i := range n {
			rot := s.cos[i*half : (i+1)*half]
			sn := s.sin[i*half : (i+1)*half]
			for h := range c.Heads {
				Rope(q[i*qd+h*hd:i*qd+(h+1)*hd], rot, sn, c.RopeStyle)
			}
			for h := range c.KVHeads {
				Rope(k[i*kvd+h*hd:i*kvd+(h+1)*hd], rot, sn, c.RopeStyle)
				s.kv.SetKey(l, h, base+i, k[i*kvd+h*hd:i*kvd+(h+1)*hd])
				_, vr := s.kv.Row(l, h, base+i)
				copy(vr, v[i*kvd+h*hd:i*kvd+(h+1)*hd])
			}
		}
		att := s.att[:n*qd]
		s.attn = attnTask{s: s, layer: l, base: base, n: n, chain: b.Tree.Chain(), q: q, out: att}
		m.threads.Run(&s.attn, s.attn.items(), 1)

		o := xn // the normalised input is no longer needed: reuse it
		if err := s.matmul(&s.actAtt, att, n, qd, []*kernels.Matrix{ly.wo}, [][]float32{o}); err != nil {
			return err
		}
		kernels.Add(x, o)

		for i := range n {
			kernels.RMSNorm(xn[i*dim:(i+1)*dim], x[i*dim:(i+1)*dim], ly.ffnNorm, c.NormEps)
		}
		gate, up := s.gate[:n*c.FFN], s.up[:n*c.FFN]
		if err := s.matmul(&s.actIn, xn, n, dim, []*kernels.Matrix{ly.wGate, ly.wUp}, [][]float32{gate, up}); err != nil {
			return err
		}
		s.silu = siluTask{gate: gate, up: up}
		m.threads.Run(&s.silu, len(gate), 4096)
		if err := s.matmul(&s.actFFN, gate, n, c.FFN, []*kernels.Matrix{ly.wDown}, [][]float32{xn}); err != nil {
			return err
		}
		kernels.Add(x, xn)
	}

	if len(b.Outputs) == 0 {
		return nil
	}
	// Only the rows asked for go through the final norm and the output layer.
	rows := grow(s.outRows, len(b.Outputs)*dim)
	s.outRows = rows
	for r, o := range b.Outputs {
		kernels.RMSNorm(rows[r*dim:(r+1)*dim], x[int(o)*dim:(int(o)+1)*dim], m.outNorm, c.NormEps)
	}
	return s.matmul(&s.actIn, rows, len(b.Outputs), dim, []*kernels.Matrix{m.output}, [][]float32{logits[:len(b.Outputs)*c.Vocab]})
}

// ancestors lists, for each token of a tree batch, the batch indices it attends to
// besides itself and the tokens held before the batch.
func (s *sequence) ancestors(tree model.Tree, n int) {
	if tree.Chain() {
		return
	}
	if cap(s.anc) < n {
		s.anc = make([][]int32, n)
	}
	s.anc = s.anc[:n]
	for i := range n {
		a := s.anc[i][:0]
		for p := tree.Parent(i); p >= 0; p = tree.Parent(int(p)) {
			a = append(a, p)
		}
		slices.Reverse(a) // root first: position order
		s.anc[i] = a
	}
}

// matmul computes y_i = x · W_iᵀ for every matrix, in one parallel run.
func (s *sequence) matmul(act *kernels.Act, x []float32, n, cols int, ms []*kernels.Matrix, ys [][]float32) error {
	act.Reset(x, n, cols)
	total := 0
	for _, m := range ms {
		if err := act.Prepare(m.Type); err != nil {
			return fmt.Errorf("llama: %w", err)
		}
		total += groups(m)
	}
	s.mul = mulTask{act: act, n: len(ms)}
	copy(s.mul.mats[:], ms)
	copy(s.mul.outs[:], ys)
	s.m.threads.Run(&s.mul, total, 1)
	return nil
}

// groups is the number of row groups of a matrix, the unit the products are shared
// out in.
func groups(m *kernels.Matrix) int { return (m.Rows + kernels.RowGroup - 1) / kernels.RowGroup }

// siluTask computes gate ← silu(gate)·up over a range of elements.
type siluTask struct{ gate, up []float32 }

// Run implements kernels.Task.
func (t *siluTask) Run(lo, hi int) { kernels.SiLUMul(t.gate[lo:hi], t.gate[lo:hi], t.up[lo:hi]) }

// mulTask computes the row groups [lo, hi) of up to three matrices stacked on each
// other.
type mulTask struct {
	act  *kernels.Act
	n    int
	mats [3]*kernels.Matrix
	outs [3][]float32
}

func (t *mulTask) Run(lo, hi int) {
	off := 0
	for i := range t.n {
		m := t.mats[i]
		g0, g1 := max(lo, off)-off, min(hi, off+groups(m))-off
		if g0 < g1 {
			m.Mul(t.act, t.outs[i], m.Rows, g0*kernels.RowGroup, min(g1*kernels.RowGroup, m.Rows))
		}
		off += groups(m)
	}
}

// Rope rotates one head's vector x in place by the angles whose cosines and sines are
// given (one per rotated pair), in the layout style.
func Rope(x, cos, sin []float32, style RopeStyle) {
	half := len(cos)
	if style == RopeInterleaved {
		for j := range half {
			a, b := x[2*j], x[2*j+1]
			x[2*j] = a*cos[j] - b*sin[j]
			x[2*j+1] = a*sin[j] + b*cos[j]
		}
		return
	}
	for j := range half {
		a, b := x[j], x[j+half]
		x[j] = a*cos[j] - b*sin[j]
		x[j+half] = a*sin[j] + b*cos[j]
	}
}

// attnBlock is the cache block size: 16 positions, one vector of scores (AVX-512) or
// two (AVX2) per head and block, the keys of a block stored dimension-major
// (kvcache.Config.KeysTransposed).
const attnBlock = 16

// attnTask computes attention for items (kv head, run of tokens): the query heads of
// the kv head's group, for each token over the tokens held before the batch and its
// own ancestors in the batch and itself, in position order. The tokens of an item
// share every read of a cache block: a verification pass of 8 tokens reads the keys
// and values once, not 8 times. It is batch-invariant: a token's result is bit for bit
// the same in a batch of one, a chain or a tree, since each token's heads are computed
// by the same calls on the same data, only interleaved with other tokens'. Each head's
// scores are computed in full, then its maximum, then the weights and their sum in
// position order, then the values added in position order — no running rescale whose
// rounding would depend on how positions were grouped.
type attnTask struct {
	s     *sequence
	layer int
	base  int
	n     int
	chain bool
	q     []float32
	out   []float32
}

// attnRun is how many tokens an attention item takes: all of a verification pass,
// a slice of a prompt so that its items spread over the threads.
const attnRun = 16

// items is the number of attention items of the task.
func (t *attnTask) items() int {
	return t.s.m.cfg.KVHeads * ((t.n + attnRun - 1) / attnRun)
}

// npos is the number of positions token i attends to.
func (t *attnTask) npos(i int) int {
	if t.chain {
		return t.base + i + 1
	}
	return t.base + len(t.s.anc[i]) + 1
}

// visible calls f(i, kb, vb, cnt, pos) with the keys and values of the positions each
// token i of [i0, i1) attends to, in position order per token — cnt rows from the
// token's pos-th position on — a cache block (or a single row) at a time, each cache
// block once for every token that sees it. keys is scratch for a tree's single keys
// ((attnBlock+1)·HeadDim floats); nil when f reads only the values (kb is then nil
// for them).
func (t *attnTask) visible(kvh, i0, i1 int, keys []float32, f func(i int, kb, vb []float32, cnt, pos int)) {
	s := t.s
	bs := s.m.kv.Config().BlockSize
	end := func(i int) int { // the cache positions token i sees in blocks
		if t.chain {
			return t.base + i + 1
		}
		return t.base
	}
	for blk := 0; blk*bs < end(i1-1); blk++ {
		kb, vb := s.kv.Block(t.layer, kvh, blk)
		for i := i0; i < i1; i++ {
			if e := end(i); blk*bs < e {
				f(i, kb, vb, min(bs, e-blk*bs), blk*bs)
			}
		}
	}
	if t.chain {
		return
	}
	// The ancestors and the token itself, a position at a time: its key gathered to
	// lane 0 of a block of its own, so that it is scored by the same lane arithmetic
	// as in a block of the cache.
	hd := s.m.cfg.HeadDim
	var kt, key []float32
	if keys != nil {
		kt, key = keys[:attnBlock*hd], keys[attnBlock*hd:(attnBlock+1)*hd]
	}
	row := func(i, pos, at int) {
		if keys != nil {
			s.kv.Key(t.layer, kvh, at, key)
			for d, x := range key {
				kt[attnBlock*d] = x
			}
		}
		_, vr := s.kv.Row(t.layer, kvh, at)
		f(i, kt, vr, 1, pos)
	}
	for i := i0; i < i1; i++ {
		pos := t.base
		for _, a := range s.anc[i] {
			row(i, pos, t.base+int(a))
			pos++
		}
		row(i, pos, t.base+i)
	}
}

func (t *attnTask) Run(lo, hi int) {
	s := t.s
	c := &s.m.cfg
	var buf []float32 // per token: its queries, scaled; then its scores
	defer func() { s.putScoreBuf(buf) }()
	for item := lo; item < hi; item++ {
		kvh, r := item%c.KVHeads, item/c.KVHeads
		i0, i1 := r*attnRun, min(t.n, (r+1)*attnRun)
		for h0 := 0; h0 < c.Heads/c.KVHeads; h0 += kernels.Group {
			buf = t.heads(kvh, h0, i0, i1, buf)
		}
	}
}

// heads computes the outputs of up to kernels.Group heads of kv head kvh's group,
// from the group's head h0 on, for the tokens [i0, i1), in buf (grown as needed).
func (t *attnTask) heads(kvh, h0, i0, i1 int, buf []float32) []float32 {
	s := t.s
	c := &s.m.cfg
	hd := c.HeadDim
	group := c.Heads / c.KVHeads
	g := min(kernels.Group, group-h0)
	heads := kvh*group + h0
	scale := float32(1 / math.Sqrt(float64(hd)))

	// Token i's scaled queries at at[i-i0], its scores g·npos after them (head h's
	// score for position j at h·npos + j); then, for a tree, the scratch of visible.
	var at [attnRun + 1]int
	for i := i0; i < i1; i++ {
		at[i-i0+1] = at[i-i0] + g*hd + g*t.npos(i)
	}
	need := at[i1-i0]
	if !t.chain {
		need += (attnBlock + 1) * hd
	}
	if cap(buf) < need {
		if buf != nil {
			s.putScoreBuf(buf)
		}
		buf = s.scoreBuf(need)
	}
	var keys []float32
	if !t.chain {
		keys = buf[at[i1-i0]:need]
	}
	qs := func(i int) []float32 { return buf[at[i-i0] : at[i-i0]+g*hd] }
	sc := func(i int) []float32 { return buf[at[i-i0]+g*hd : at[i-i0+1]] }
	for i := i0; i < i1; i++ {
		clear(t.out[(i*c.Heads+heads)*hd : (i*c.Heads+heads+g)*hd])
		q := qs(i)
		for j, v := range t.q[(i*c.Heads+heads)*hd : (i*c.Heads+heads+g)*hd] {
			q[j] = v * scale
		}
	}
	t.visible(kvh, i0, i1, keys, func(i int, kt, _ []float32, cnt, pos int) {
		kernels.ScoreBlock(kt, hd, qs(i), g, sc(i)[pos:], t.npos(i), cnt)
	})
	for i := i0; i < i1; i++ {
		npos, scores := t.npos(i), sc(i)
		for h := range g {
			hs := scores[h*npos : (h+1)*npos]
			inv := float32(1 / kernels.ExpShifted(hs, kernels.Max(hs), 1))
			kernels.Scale(hs, inv)
		}
	}
	t.visible(kvh, i0, i1, nil, func(i int, _, vb []float32, cnt, pos int) {
		outs := t.out[(i*c.Heads+heads)*hd : (i*c.Heads+heads+g)*hd]
		kernels.WeightedSum(sc(i)[pos:], t.npos(i), vb, cnt, outs, g)
	})
	return buf
}
