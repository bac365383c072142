package gpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/specula/specula/model"
)

var errClosed = fmt.Errorf("gpu: %w", model.ErrClosed)

// errModelClosed is returned when a sequence of a closed model is used.
var errModelClosed = errors.New("gpu: model is closed")

// do runs f on the model's device, unless the model is closed.
func (m *Model) do(f func(b backend) error) error {
	return m.dev.do(func(b backend) error {
		if m.closed {
			return errModelClosed
		}
		return f(b)
	})
}

// Sequence is one request's state in a [Model]: its block table in the device
// key/value pool and its length. It implements [model.Sequence], and adds [Sequence.Fork].
// Not safe for concurrent use.
type Sequence struct {
	m      *Model
	kv     *seqKV
	closed bool

	plan  plan
	pairs []int32
}

// NewSequence implements [model.Model].
func (m *Model) NewSequence(ctx context.Context) (model.Sequence, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("gpu: new sequence: %w", err)
	}
	err := m.do(func(backend) error { return nil })
	if err != nil {
		return nil, err
	}
	return &Sequence{m: m, kv: &seqKV{p: m.pool}}, nil
}

// Len implements [model.Sequence].
func (s *Sequence) Len() int {
	if s.closed {
		return 0
	}
	return s.kv.n
}

// Close implements [model.Sequence]: the sequence's blocks go back to the pool (those
// no other sequence holds).
func (s *Sequence) Close() error {
	if s.closed {
		return errors.New("gpu: sequence closed twice")
	}
	s.closed = true
	return s.m.dev.do(func(backend) error {
		s.kv.close()
		return nil
	})
}

// Truncate implements [model.Sequence].
func (s *Sequence) Truncate(n int) error {
	if s.closed {
		return errClosed
	}
	if n < 0 || n > s.kv.n {
		return fmt.Errorf("gpu: truncate to %d outside [0, %d]", n, s.kv.n)
	}
	return s.m.do(func(backend) error {
		s.kv.truncate(n)
		return nil
	})
}

// Fork returns a new sequence with the same tokens, sharing the key/value blocks of s
// until one of them writes into a shared block, which is then copied (copy on write).
// The new sequence must be closed on its own.
func (s *Sequence) Fork() (*Sequence, error) {
	if s.closed {
		return nil, errClosed
	}
	f := &Sequence{m: s.m}
	err := s.m.do(func(backend) error {
		f.kv = s.kv.fork()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Retain implements [model.Sequence].
func (s *Sequence) Retain(from int, keep []int32) error {
	if s.closed {
		return errClosed
	}
	if err := model.CheckRetain(from, keep, s.kv.n); err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	return s.m.do(func(b backend) error {
		var err error
		s.pairs, err = s.kv.retain(from, keep, s.pairs[:0])
		if err != nil {
			return err
		}
		return s.m.copySlots(b, s.pairs)
	})
}

// copySlots makes the slot copies the block pool asked for.
func (m *Model) copySlots(b backend, pairs []int32) error {
	if len(pairs) == 0 {
		return nil
	}
	need := int64(4 * len(pairs))
	if need > m.s.pairBytes {
		if m.s.pairs != 0 {
			if err := b.free(m.s.pairs); err != nil {
				return err
			}
			m.s.pairs, m.s.pairBytes = 0, 0
		}
		p, err := b.alloc(max(need, 4096))
		if err != nil {
			return fmt.Errorf("gpu: buffer for key/value copies: %w", err)
		}
		m.s.pairs, m.s.pairBytes = p, max(need, 4096)
	}
	if err := b.upload(m.s.pairs, bytesOf(pairs)); err != nil {
		return err
	}
	return b.kvCopy(m.pool.geom, m.s.pairs, len(pairs)/2)
}

// Forward implements [model.Sequence].
func (s *Sequence) Forward(ctx context.Context, b model.Batch, logits []float32) error {
	if s.closed {
		return errClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("gpu: forward: %w", err)
	}
	m := s.m
	c := &m.cfg
	base := s.kv.n
	if err := model.CheckBatch(b, base, c.Vocab, c.ContextLength, len(logits)); err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	n := len(b.Tokens)
	if n == 0 {
		return nil
	}
	err := m.do(func(be backend) error {
		var err error
		s.pairs, err = s.kv.grow(n, s.pairs[:0])
		if err == nil {
			err = m.copySlots(be, s.pairs)
		}
		if err == nil {
			err = m.forward(ctx, be, s, b, base, logits)
		}
		if err != nil && s.kv.n > base {
			s.kv.truncate(base)
		}
		return err
	})
	return err
}

// chunk is one pass of a forward: tokens [lo, hi) and the output rows among them.
type chunk struct {
	lo, hi int
	// outs are the logits rows (indices into Batch.Outputs) computed in this pass, in
	// order: plan.outRows[outs0:outs1]. Their token indices, local to the pass, are at
	// outOff in the plan's ints.
	outs0, outs1 int
	outOff       int
	maxVisible   int
}

// plan is what the host computes for a forward and uploads in one copy: per token its
// id, cache slot, rotary cosines and sines, and what it attends to; the sequence's
// block table; the output rows of each pass.
type plan struct {
	depth                []int32
	anc                  []int32
	prefix, exOff, exCnt []int32
	ints                 []int32
	rope                 []float32
	outRows              []int32
	// Offsets, in int32s, of the sections of ints.
	oTokens, oSlots, oPrefix, oExOff, oExCnt, oExtras, oTable int
	ropeOff                                                   int64 // bytes
	chunks                                                    []chunk
	outIdx                                                    []int32
}

// align4 rounds n up to a multiple of 4 (16 bytes of int32).
func align4(n int) int { return (n + 3) &^ 3 }

// build fills the plan for batch b appended to a sequence of base tokens.
func (p *plan) build(b model.Batch, base int, kv *seqKV, invFreq []float64, maxBatch int) {
	n := len(b.Tokens)
	p.depth = grow(p.depth, n)
	for i := range n {
		p.depth[i] = int32(b.Tree.Depth(i))
	}
	tree := !b.Tree.Chain()
	// Extras: for a tree token, its ancestors in the batch, root first, then itself.
	p.anc = p.anc[:0]
	p.prefix, p.exOff, p.exCnt = grow(p.prefix, n), grow(p.exOff, n), grow(p.exCnt, n)
	prefix, exOff, exCnt := p.prefix, p.exOff, p.exCnt
	for i := range n {
		if !tree {
			prefix[i], exOff[i], exCnt[i] = int32(base+i+1), 0, 0
			continue
		}
		prefix[i] = int32(base)
		start := len(p.anc)
		for a := int32(i); a >= 0; a = b.Tree.Parent(int(a)) {
			p.anc = append(p.anc, a)
		}
		slices.Reverse(p.anc[start:])
		exOff[i], exCnt[i] = int32(start), int32(len(p.anc)-start)
	}
	table := kv.table
	// Sections.
	off := 0
	next := func(size int) int {
		o := off
		off = align4(off + size)
		return o
	}
	p.oTokens = next(n)
	p.oSlots = next(n)
	p.oPrefix = next(n)
	p.oExOff = next(n)
	p.oExCnt = next(n)
	p.oExtras = next(len(p.anc))
	p.oTable = next(len(table))
	// Passes and their outputs.
	p.chunks = p.chunks[:0]
	p.outIdx = p.outIdx[:0]
	p.outRows = p.outRows[:0]
	for lo := 0; lo < n; lo += maxBatch {
		hi := min(n, lo+maxBatch)
		ch := chunk{lo: lo, hi: hi, outs0: len(p.outRows)}
		for r, o := range b.Outputs {
			if int(o) >= lo && int(o) < hi {
				p.outRows = append(p.outRows, int32(r))
				p.outIdx = append(p.outIdx, o-int32(lo))
			}
		}
		ch.outs1 = len(p.outRows)
		for i := lo; i < hi; i++ {
			ch.maxVisible = max(ch.maxVisible, int(prefix[i]+exCnt[i]))
		}
		p.chunks = append(p.chunks, ch)
	}
	oOut := next(len(p.outIdx))
	for i := range p.chunks {
		p.chunks[i].outOff = oOut + p.chunks[i].outs0
	}
	p.ints = grow(p.ints, off)
	ints := p.ints
	copy(ints[p.oTokens:], b.Tokens)
	for i := range n {
		ints[p.oSlots+i] = kv.slot(base + i)
	}
	copy(ints[p.oPrefix:], prefix)
	copy(ints[p.oExOff:], exOff)
	copy(ints[p.oExCnt:], exCnt)
	copy(ints[p.oExtras:], p.anc)
	copy(ints[p.oTable:], table)
	copy(ints[oOut:], p.outIdx)
	p.ropeOff = int64(4 * off)
	// Rotary angles at position base + depth, as model/llama computes them.
	half := len(invFreq)
	p.rope = grow(p.rope, n*2*half)
	for i := range n {
		pos := float64(base + int(p.depth[i]))
		for j, f := range invFreq {
			sin, cos := math.Sincos(pos * f)
			p.rope[i*2*half+j], p.rope[i*2*half+half+j] = float32(cos), float32(sin)
		}
	}
}

func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// ensureScratch sizes the activation buffers for passes of up to tokens tokens and outs
// output rows, and the plan buffer for meta bytes.
func (m *Model) ensureScratch(b backend, tokens, outs int, meta int64) error {
	c := &m.cfg
	s := &m.s
	realloc := func(p *devptr, bytes int64, what string) error {
		if *p != 0 {
			if err := b.free(*p); err != nil {
				return err
			}
			*p = 0
		}
		np, err := b.alloc(bytes)
		if err != nil {
			return fmt.Errorf("gpu: scratch buffer %s of %d bytes: %w", what, bytes, err)
		}
		*p = np
		return nil
	}
	if tokens > s.tokens {
		n := int64(tokens) * 4
		qd, kvd := int64(c.Heads*c.HeadDim), int64(c.KVHeads*c.HeadDim)
		for _, buf := range []struct {
			p    *devptr
			size int64
			name string
		}{
			{&s.x, n * int64(c.Dim), "x"}, {&s.xn, n * int64(c.Dim), "xn"}, {&s.qkv, n * (qd + 2*kvd), "qkv"},
			{&s.q, n * qd, "q"}, {&s.att, n * qd, "att"}, {&s.gu, n * 2 * int64(c.FFN), "gate/up"}, {&s.h, n * int64(c.FFN), "h"},
		} {
			if err := realloc(buf.p, buf.size, buf.name); err != nil {
				s.tokens = 0
				return err
			}
		}
		s.tokens = tokens
	}
	if outs > s.outs {
		if err := realloc(&s.rows, int64(outs)*4*int64(c.Dim), "rows"); err != nil {
			s.outs = 0
			return err
		}
		if err := realloc(&s.logits, int64(outs)*4*int64(c.Vocab), "logits"); err != nil {
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

// project multiplies x (n rows) by the matrices of p into out (row stride ldo).
func project(b backend, out devptr, ldo int, x devptr, n int, p proj, accumulate bool) error {
	for i, w := range p.parts {
		if err := b.matmul(out+devptr(4*p.offs[i]), ldo, x, n, w, accumulate); err != nil {
			return err
		}
	}
	return nil
}

// forward runs batch b through the model, appended at base (the cache already grown).
func (m *Model) forward(ctx context.Context, b backend, s *Sequence, bt model.Batch, base int, logits []float32) error {
	c := &m.cfg
	p := &s.plan
	p.build(bt, base, s.kv, m.invFreq, m.opts.MaxBatch)
	n := len(bt.Tokens)
	maxOuts := 0
	for _, ch := range p.chunks {
		maxOuts = max(maxOuts, ch.outs1-ch.outs0)
	}
	ropeBytes := int64(4 * len(p.rope))
	if err := m.ensureScratch(b, min(n, m.opts.MaxBatch), maxOuts, p.ropeOff+ropeBytes); err != nil {
		return err
	}
	// One upload: the int32 sections, then the rotary table.
	st := grow(m.s.stage, int(p.ropeOff+ropeBytes))
	m.s.stage = st
	copy(st, bytesOf(p.ints))
	copy(st[p.ropeOff:], bytesOf(p.rope))
	if err := b.upload(m.s.meta, st); err != nil {
		return err
	}
	meta := m.s.meta
	at := func(off int) devptr { return meta + devptr(4*off) }
	geom := m.pool.geom
	dim, hd, ffn := c.Dim, c.HeadDim, c.FFN
	width := (c.Heads + 2*c.KVHeads) * hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	for _, ch := range p.chunks {
		lo, nc := ch.lo, ch.hi-ch.lo
		if err := b.embed(m.s.x, m.embed, at(p.oTokens+lo), nc); err != nil {
			return err
		}
		for l := range m.layers {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("gpu: forward: %w", err)
			}
			ly := &m.layers[l]
			if err := b.rmsNorm(m.s.xn, m.s.x, ly.attnNorm, 0, nc, dim, c.NormEps); err != nil {
				return err
			}
			if err := project(b, m.s.qkv, width, m.s.xn, nc, ly.qkv, false); err != nil {
				return err
			}
			err := b.qkv(qkvArgs{qkv: m.s.qkv, bias: ly.bias, rope: meta + devptr(p.ropeOff) + devptr(4*lo*2*(c.RopeDim/2)),
				slots: at(p.oSlots + lo), q: m.s.q, n: nc, heads: c.Heads, ropeDim: c.RopeDim, style: int(c.RopeStyle),
				layer: l, kv: geom})
			if err != nil {
				return err
			}
			err = b.attention(attnArgs{q: m.s.q, out: m.s.att, table: at(p.oTable),
				prefix: at(p.oPrefix + lo), extraOff: at(p.oExOff + lo), extraCnt: at(p.oExCnt + lo), extras: at(p.oExtras),
				n: nc, heads: c.Heads, base: base, layer: l, maxVisible: ch.maxVisible, scale: scale, kv: geom})
			if err != nil {
				return err
			}
			if err := project(b, m.s.x, dim, m.s.att, nc, ly.o, true); err != nil {
				return err
			}
			if err := b.rmsNorm(m.s.xn, m.s.x, ly.ffnNorm, 0, nc, dim, c.NormEps); err != nil {
				return err
			}
			if err := project(b, m.s.gu, 2*ffn, m.s.xn, nc, ly.gateUp, false); err != nil {
				return err
			}
			if err := b.siluMul(m.s.h, m.s.gu, nc, ffn); err != nil {
				return err
			}
			if err := project(b, m.s.x, dim, m.s.h, nc, ly.down, true); err != nil {
				return err
			}
		}
		if err := m.outputs(b, p.outRows[ch.outs0:ch.outs1], at(ch.outOff), logits); err != nil {
			return err
		}
	}
	return nil
}

// outputs computes the logits rows outs of a pass, whose tokens' indices in the pass
// are at rows, and copies them to logits.
func (m *Model) outputs(b backend, outs []int32, rows devptr, logits []float32) error {
	mc := len(outs)
	if mc == 0 {
		return nil
	}
	c := &m.cfg
	V := c.Vocab
	if err := b.rmsNorm(m.s.rows, m.s.x, m.outNorm, rows, mc, c.Dim, c.NormEps); err != nil {
		return err
	}
	if err := b.matmul(m.s.logits, V, m.s.rows, mc, m.output, false); err != nil {
		return err
	}
	r0 := int(outs[0])
	consecutive := true
	for k, r := range outs {
		consecutive = consecutive && int(r) == r0+k
	}
	if consecutive {
		return b.download(bytesOf(logits[r0*V:(r0+mc)*V]), m.s.logits)
	}
	st := grow(m.s.logitStage, mc*V)
	m.s.logitStage = st
	if err := b.download(bytesOf(st), m.s.logits); err != nil {
		return err
	}
	for k, r := range outs {
		copy(logits[int(r)*V:(int(r)+1)*V], st[k*V:(k+1)*V])
	}
	return nil
}

// Forward implements [model.Model].
func (m *Model) Forward(ctx context.Context, work []model.Work) error {
	if err := model.CheckWork(work); err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	for i, w := range work {
		if err := w.Seq.Forward(ctx, w.Batch, w.Logits); err != nil {
			for _, d := range work[:i] {
				_ = d.Seq.Truncate(d.Seq.Len() - len(d.Batch.Tokens))
			}
			return fmt.Errorf("work item %d: %w", i, err)
		}
	}
	return nil
}
