package cpu

import (
	"fmt"
	"math"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/internal/kernels"
	"github.com/specula/specula/internal/vecmath"
)

// attnBlock is the cache block size: 16 positions, one vector of scores (AVX-512) or
// two (AVX2) per head and block, the keys of a block stored dimension-major.
const attnBlock = 16

// attnRun is how many rows an attention item takes: all of a verification pass, a
// slice of a prompt so that its items spread over the threads.
const attnRun = 16

// Attention implements [backend.Pass].
func (ps *pass) Attention(layer int, a backend.Attn) {
	bv, ok := ps.optional(a.Bias)
	if !ok || ps.err != nil {
		return
	}
	rope, err := ps.plan.Rotation(a.Local)
	if err == nil {
		err = ps.checkKV(layer, a.Window)
	}
	if err != nil {
		ps.fail(fmt.Errorf("cpu: %w", err))
		return
	}
	ps.store(layer, bv, rope)
	ps.attn.start(ps, layer, a)
	ps.b.pool.k.Run(&ps.attn, ps.attn.items(), 1)
}

// checkKV checks that layer has a key/value pool and that the plan's rows hold, in
// it, what they see.
func (ps *pass) checkKV(layer, window int) error {
	if layer < 0 || layer >= len(ps.b.kvmap.Pool) || ps.b.kvmap.Pool[layer] < 0 {
		return fmt.Errorf("layer %d has no key/value pool", layer)
	}
	return ps.plan.CheckHeld(ps.b.kvmap.Pool[layer], window, attnBlock)
}

// store adds the biases to every row of QKV, rotates its queries and keys by the
// rows' angles in rope, and stores its keys and values at the row's slot.
func (ps *pass) store(layer int, bias vector, ropes []float32) {
	s := &ps.b.shape
	hd, w := s.HeadDim, s.QKVWidth()
	half := s.RopeDim / 2
	qkv := ps.buf(backend.QKV)
	kOff, vOff := s.Heads*hd, (s.Heads+s.KVHeads)*hd
	st, index := ps.b.layerKV(layer)
	slots := ps.plan.SlotsOf(ps.b.kvmap.Pool[layer])
	for r := range ps.rows {
		row := qkv[r*w : (r+1)*w]
		if bias != nil {
			kernels.Add(row, bias)
		}
		rope := ropes[r*2*half : (r+1)*2*half]
		cos, sin := rope[:half], rope[half:]
		for h := range s.Heads {
			backend.Rope(row[h*hd:(h+1)*hd], cos, sin, s.Style)
		}
		for h := range s.KVHeads {
			k := row[kOff+h*hd : kOff+(h+1)*hd]
			backend.Rope(k, cos, sin, s.Style)
			st.put(slots[r], index, h, k, row[vOff+h*hd:vOff+(h+1)*hd])
		}
	}
}

// attnTask computes attention for items (span, kv head, run of rows): the query heads
// of the kv head's group, for each row over the positions the plan says it sees, in
// position order. The rows of an item share every read of a cache block: a
// verification pass of 8 tokens reads the keys and values once, not 8 times. It is
// batch-invariant: a row's result is bit for bit the same in a pass of one, a chain or
// a tree, since each row's heads are computed by the same calls on the same data, only
// interleaved with other rows'. Each head's scores are computed in full, then its
// maximum, then the weights and their sum in position order, then the values added in
// position order — no running rescale whose rounding would depend on how positions
// were grouped.
//
// In a sliding-window layer a row skips the cache blocks wholly before its window;
// the positions before the window in the block where it starts are scored and then
// masked (−∞, a weight of exactly 0), so that blocks are still read whole.
type attnTask struct {
	ps    *pass
	st    *store // the layer's key/value storage
	index int    // the layer's place in it
	pool  int    // which of the plan's pools it is
	scale float32
	first []int // per span: its first item; one more at the end
	// Per row, for a sliding-window layer (empty otherwise): the first position of
	// the cache prefix it scores (a block start, or Prefix when it scores none), how
	// many of those are masked, and how many of its extras lie before the window.
	from, masked, skip []int32
}

// start readies the task for one layer of the pass.
func (t *attnTask) start(ps *pass, layer int, a backend.Attn) {
	t.ps, t.scale, t.pool = ps, a.ScoreScale(ps.b.shape.HeadDim), ps.b.kvmap.Pool[layer]
	t.st, t.index = ps.b.layerKV(layer)
	kvh := ps.b.shape.KVHeads
	t.first = append(t.first[:0], 0)
	for _, sp := range ps.plan.Spans {
		t.first = append(t.first, t.first[len(t.first)-1]+kvh*((sp.Hi-sp.Lo+attnRun-1)/attnRun))
	}
	t.from, t.masked, t.skip = t.from[:0], t.masked[:0], t.skip[:0]
	if a.Window > 0 {
		t.window(a.Window)
	}
}

// window computes each row's window bounds.
func (t *attnTask) window(w int) {
	p := t.ps.plan
	for r := range t.ps.rows {
		lo, pre := int32(p.WindowStart(r, w)), p.Prefix[r]
		from, masked := pre, int32(0)
		if lo < pre {
			from = lo / attnBlock * attnBlock
			masked = lo - from
		}
		t.from, t.masked = append(t.from, from), append(t.masked, masked)
		t.skip = append(t.skip, max(0, lo-pre))
	}
}

// items is the number of attention items of the pass.
func (t *attnTask) items() int { return t.first[len(t.first)-1] }

// rowWindow returns the first prefix position row r scores, how many of them are
// masked, and how many of its extras it skips: zeros outside a sliding window.
func (t *attnTask) rowWindow(r int) (from, masked, skip int) {
	if len(t.from) == 0 {
		return 0, 0, 0
	}
	return int(t.from[r]), int(t.masked[r]), int(t.skip[r])
}

// npos is the number of positions row r scores.
func (t *attnTask) npos(r int) int {
	p := t.ps.plan
	from, _, skip := t.rowWindow(r)
	return int(p.Prefix[r]+p.ExtraOff[r+1]-p.ExtraOff[r]) - from - skip
}

// Run implements kernels.Task.
func (t *attnTask) Run(lo, hi int) {
	ps := t.ps
	s := &ps.b.shape
	var buf []float32 // per row: its queries, scaled; then its scores
	defer func() { ps.putScoreBuf(buf) }()
	span := 0
	for item := lo; item < hi; item++ {
		for item >= t.first[span+1] {
			span++
		}
		sp := &ps.plan.Spans[span]
		local := item - t.first[span]
		kvh, run := local%s.KVHeads, local/s.KVHeads
		r0, r1 := sp.Lo+run*attnRun, min(sp.Hi, sp.Lo+(run+1)*attnRun)
		for h0 := 0; h0 < s.Heads/s.KVHeads; h0 += kernels.Group {
			buf = t.heads(sp, kvh, h0, r0, r1, buf)
		}
	}
}

// visible calls f(r, kb, vb, cnt, pos) with the keys and values of the positions each
// row r of [r0, r1) attends to, in position order per row — cnt positions from the
// row's pos-th on — a cache block (or a single position) at a time, each cache block
// once for every row that sees it. keys is scratch for single keys
// ((attnBlock+1)·HeadDim floats); nil when f reads only the values (kb is then nil for
// them).
func (t *attnTask) visible(sp *backend.Span, kvh, r0, r1 int, keys []float32, f func(r int, kb, vb []float32, cnt, pos int)) {
	ps := t.ps
	p := ps.plan
	st, table := t.st, sp.TableOf(t.pool)
	maxPrefix, minFrom := 0, math.MaxInt
	for r := r0; r < r1; r++ {
		from, _, _ := t.rowWindow(r)
		maxPrefix, minFrom = max(maxPrefix, int(p.Prefix[r])), min(minFrom, from)
	}
	for blk := minFrom / attnBlock; blk*attnBlock < maxPrefix; blk++ {
		kb, vb := st.kv(table[blk], t.index, kvh)
		for r := r0; r < r1; r++ {
			from, _, _ := t.rowWindow(r)
			if e := int(p.Prefix[r]); blk*attnBlock < e && blk*attnBlock >= from {
				f(r, kb, vb, min(attnBlock, e-blk*attnBlock), blk*attnBlock-from)
			}
		}
	}
	if sp.Chain {
		return
	}
	// The extras a position at a time: its key gathered to lane 0 of a block of its
	// own, so that it is scored by the same lane arithmetic as in a block of the cache.
	hd := ps.b.shape.HeadDim
	var kt, key []float32
	if keys != nil {
		kt, key = keys[:attnBlock*hd], keys[attnBlock*hd:(attnBlock+1)*hd]
	}
	for r := r0; r < r1; r++ {
		from, _, skip := t.rowWindow(r)
		pos := int(p.Prefix[r]) - from
		for _, at := range p.Extra[int(p.ExtraOff[r])+skip : p.ExtraOff[r+1]] {
			slot := table[int(at)/attnBlock]*attnBlock + at%attnBlock
			if keys != nil {
				st.key(slot, t.index, kvh, key)
				for d, x := range key {
					kt[attnBlock*d] = x
				}
			}
			f(r, kt, st.value(slot, t.index, kvh), 1, pos)
			pos++
		}
	}
}

// heads computes the outputs of up to kernels.Group heads of kv head kvh's group,
// from the group's head h0 on, for the rows [r0, r1), in buf (grown as needed).
func (t *attnTask) heads(sp *backend.Span, kvh, h0, r0, r1 int, buf []float32) []float32 {
	ps := t.ps
	s := &ps.b.shape
	hd := s.HeadDim
	group := s.Heads / s.KVHeads
	g := min(kernels.Group, group-h0)
	heads := kvh*group + h0
	scale := t.scale
	w := s.QKVWidth()
	qkv, out := ps.buf(backend.QKV), ps.buf(backend.Att)
	qd := s.Heads * hd

	// Row r's scaled queries at at[r-r0], its scores g·npos after them (head h's
	// score for position j at h·npos + j); then, for a tree, the scratch of visible.
	var at [attnRun + 1]int
	for r := r0; r < r1; r++ {
		at[r-r0+1] = at[r-r0] + g*hd + g*t.npos(r)
	}
	need := at[r1-r0]
	if !sp.Chain {
		need += (attnBlock + 1) * hd
	}
	if cap(buf) < need {
		if buf != nil {
			ps.putScoreBuf(buf)
		}
		buf = ps.scoreBuf(need)
	}
	var keys []float32
	if !sp.Chain {
		keys = buf[at[r1-r0]:need]
	}
	qs := func(r int) []float32 { return buf[at[r-r0] : at[r-r0]+g*hd] }
	sc := func(r int) []float32 { return buf[at[r-r0]+g*hd : at[r-r0+1]] }
	for r := r0; r < r1; r++ {
		clear(out[r*qd+heads*hd : r*qd+(heads+g)*hd])
		q := qs(r)
		for j, v := range qkv[r*w+heads*hd : r*w+(heads+g)*hd] {
			q[j] = v * scale
		}
	}
	t.visible(sp, kvh, r0, r1, keys, func(r int, kt, _ []float32, cnt, pos int) {
		kernels.ScoreBlock(kt, hd, qs(r), g, sc(r)[pos:], t.npos(r), cnt)
	})
	for r := r0; r < r1; r++ {
		npos, scores := t.npos(r), sc(r)
		_, masked, _ := t.rowWindow(r)
		for h := range g {
			hs := scores[h*npos : (h+1)*npos]
			for j := range masked {
				hs[j] = float32(math.Inf(-1)) // before the window: a weight of 0
			}
			inv := float32(1 / vecmath.ExpShifted(hs, vecmath.Max(hs), 1))
			vecmath.Scale(hs, inv)
		}
	}
	t.visible(sp, kvh, r0, r1, nil, func(r int, _, vb []float32, cnt, pos int) {
		kernels.WeightedSum(sc(r)[pos:], t.npos(r), vb, cnt, out[r*qd+heads*hd:r*qd+(heads+g)*hd], g)
	})
	return buf
}

// scoreBuf takes a buffer of at least n floats for attention scores.
func (ps *pass) scoreBuf(n int) []float32 {
	select {
	case b := <-ps.scores:
		if cap(b) >= n {
			return b[:n]
		}
	default:
	}
	return make([]float32, n, n+n/2)
}

// putScoreBuf returns a buffer for the next task to use.
func (ps *pass) putScoreBuf(b []float32) {
	select {
	case ps.scores <- b:
	default:
	}
}
