package backend

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/kvcache"
)

// Plan describes one pass: its rows (one per token, the sequences one after another)
// and, for each, what the layers need to know besides the weights. It is built on the
// host once per pass, by [Plan.Add], and read by the backend.
type Plan struct {
	// Tokens is the token of each row.
	Tokens []int32
	// Slots is the physical key/value slot each row's keys and values go to, in the
	// first pool; SlidingSlots in the sliding layers' pool when the model keeps one
	// ([KVSpec]).
	Slots, SlidingSlots []int32
	// Rope holds, per row, Shape.RopeDim/2 cosines and then as many sines: the
	// rotation for the row's position.
	Rope []float32
	// LocalRope is the same for the local rotary frequencies (LocalInvFreq), when the
	// model has them: the rotation of its sliding-window layers ([Attn.Local]).
	LocalRope []float32
	// Each row attends, in position order, to the positions [0, Prefix[r]) of its
	// sequence and then to the positions Extra[ExtraOff[r]:ExtraOff[r+1]]. A row of a
	// chain sees everything up to its own position and has no extras; a row of a tree
	// sees what the sequence held before the batch, then its ancestors and itself.
	Prefix, ExtraOff, Extra []int32
	// Spans are the sequences of the pass, each a run of rows.
	Spans []Span
	// Outputs are the rows whose logits are wanted, in the order they are written.
	Outputs []Output
	// States are the hidden states wanted of rows: each a row of X after a layer, or
	// the final normed one.
	States []State
	// Inputs holds the input vectors of the rows, Dim values each, for a model that
	// takes one beside each token; empty otherwise.
	Inputs []float32

	// Dim is the width of a hidden state, InvFreq the rotary frequencies,
	// LocalInvFreq those of the local layers (nil: none), and RopeScale a factor on
	// the cosines and sines (0 or 1: none; longrope's attention factor): what
	// [Plan.Add] needs of the model. The caller sets them before the first Add.
	Dim          int
	InvFreq      []float64
	LocalInvFreq []float64
	RopeScale    float32
}

// State is a hidden state wanted of a row: X after layer Layer, or the final normed
// row for [FinalLayer], written to Dst (Dim values).
type State struct {
	Row   int
	Layer int
	Dst   []float32
}

// Span is one sequence's rows of a pass.
type Span struct {
	Lo, Hi int // rows [Lo, Hi)
	// Table is the sequence's block table ([kvcache.Seq.Table]). Its first entries
	// may be [kvcache.Hole]: blocks a sequence of a sliding-window model gave back,
	// whose positions lie wholly before every row's window; they must not be read.
	Table []int32
	// SlidingTable is its block table in the sliding layers' pool; nil: none. Its
	// first entries may be holes too.
	SlidingTable []int32
	Chain        bool // the rows are a chain: no row has extras
}

// Output is a row whose logits are wanted: they go to Logits[Index·Vocab :
// (Index+1)·Vocab].
type Output struct {
	Row    int
	Logits []float32
	Index  int
}

// InputRows returns the rows' input vectors, which [Pass.Load] writes: an error unless
// every row has one of Dim values.
func (p *Plan) InputRows() ([]float32, error) {
	if len(p.Inputs) != p.Rows()*p.Dim {
		return nil, fmt.Errorf("backend: the plan has %d input values for %d rows of %d", len(p.Inputs), p.Rows(), p.Dim)
	}
	return p.Inputs, nil
}

// Rows is the number of rows of the plan.
func (p *Plan) Rows() int { return len(p.Tokens) }

// Reset empties the plan for the next pass, keeping its memory but no reference to
// the buffers of the last one.
func (p *Plan) Reset() {
	clear(p.Spans)
	clear(p.Outputs)
	clear(p.States)
	p.Tokens, p.Slots, p.SlidingSlots = p.Tokens[:0], p.Slots[:0], p.SlidingSlots[:0]
	p.Rope, p.LocalRope = p.Rope[:0], p.LocalRope[:0]
	p.Prefix, p.Extra, p.Spans, p.Outputs = p.Prefix[:0], p.Extra[:0], p.Spans[:0], p.Outputs[:0]
	p.States, p.Inputs = p.States[:0], p.Inputs[:0]
	p.ExtraOff = append(p.ExtraOff[:0], 0)
}

// Add appends the tokens [lo, hi) of batch b to the plan: b is appended to a sequence
// that held base positions before it and whose books kv (and sliding, its books in
// the sliding layers' pool; nil: none) already hold the batch. The batch's output
// rows among them write to logits, its states to b.Hidden.
func (p *Plan) Add(kv, sliding *kvcache.Seq, base int, b batch.Batch, lo, hi int, logits []float32) {
	if len(p.ExtraOff) == 0 {
		p.ExtraOff = append(p.ExtraOff, 0)
	}
	row0 := len(p.Tokens)
	chain := b.Tree.Chain()
	sp := Span{Lo: row0, Hi: row0 + hi - lo, Table: kv.Table(), Chain: chain}
	if sliding != nil {
		sp.SlidingTable = sliding.Table()
	}
	p.Spans = append(p.Spans, sp)
	for i := lo; i < hi; i++ {
		pos := base + b.Tree.Depth(i)
		p.Tokens = append(p.Tokens, b.Tokens[i])
		p.Slots = append(p.Slots, kv.Slot(base+i))
		if sliding != nil {
			p.SlidingSlots = append(p.SlidingSlots, sliding.Slot(base+i))
		}
		p.Rope = appendRope(p.Rope, pos, p.InvFreq, p.RopeScale)
		if p.LocalInvFreq != nil {
			p.LocalRope = appendRope(p.LocalRope, pos, p.LocalInvFreq, 1)
		}
		if chain {
			p.Prefix = append(p.Prefix, int32(base+i+1))
		} else {
			p.Prefix = append(p.Prefix, int32(base))
			p.Extra = appendPath(p.Extra, b.Tree, i, base)
		}
		p.ExtraOff = append(p.ExtraOff, int32(len(p.Extra)))
	}
	for r, o := range b.Outputs {
		if int(o) >= lo && int(o) < hi {
			p.Outputs = append(p.Outputs, Output{Row: row0 + int(o) - lo, Logits: logits, Index: r})
		}
	}
	p.addStates(b, lo, hi, row0)
	if len(b.Inputs) > 0 {
		p.Inputs = append(p.Inputs, b.Inputs[lo*p.Dim:hi*p.Dim]...)
	}
}

// addStates appends the states batch b asks of its tokens [lo, hi), which are the
// plan's rows from row0 on.
func (p *Plan) addStates(b batch.Batch, lo, hi, row0 int) {
	width := b.StateWidth(p.Dim)
	for r, o := range b.States {
		if int(o) < lo || int(o) >= hi {
			continue
		}
		row := b.Hidden[r*width : (r+1)*width]
		for j, l := range b.StateLayers {
			p.States = append(p.States, State{Row: row0 + int(o) - lo, Layer: int(l), Dst: row[j*p.Dim : (j+1)*p.Dim]})
		}
		p.States = append(p.States, State{Row: row0 + int(o) - lo, Layer: FinalLayer, Dst: row[len(b.StateLayers)*p.Dim:]})
	}
}

// CheckHeld checks, for a layer of window w (0: none) whose keys and values live in
// pool (0 the first, 1 the sliding layers') in blocks of blockSize positions, that
// every row has a slot there and every span's table holds the blocks its rows see: a
// block a sequence gave back ([kvcache.Hole], only ever at the front of a table), read
// by attention, would be another sequence's memory or none.
func (p *Plan) CheckHeld(pool, w, blockSize int) error {
	if n := len(p.SlotsOf(pool)); n != p.Rows() {
		return fmt.Errorf("backend: %d key/value slots in pool %d for %d rows", n, pool, p.Rows())
	}
	for i := range p.Spans {
		sp := &p.Spans[i]
		table := sp.TableOf(pool)
		first := math.MaxInt
		for r := sp.Lo; r < sp.Hi; r++ {
			first = min(first, p.WindowStart(r, w))
		}
		if blk := first / blockSize; blk < len(table) && table[blk] < 0 {
			return fmt.Errorf("backend: a row sees position %d, whose key/value block was given back", first)
		}
	}
	return nil
}

// SlotsOf returns the rows' slots in the first pool (0) or the sliding layers' (1).
func (p *Plan) SlotsOf(pool int) []int32 {
	if pool == 1 {
		return p.SlidingSlots
	}
	return p.Slots
}

// TableOf returns the span's block table in the first pool (0) or the sliding
// layers' (1).
func (sp *Span) TableOf(pool int) []int32 {
	if pool == 1 {
		return sp.SlidingTable
	}
	return sp.Table
}

// Rotation returns the rows' rotations, each RopeDim/2 cosines then as many sines:
// the local ones (for a sliding layer of Gemma 3) or the plan's main ones.
func (p *Plan) Rotation(local bool) ([]float32, error) {
	if !local {
		return p.Rope, nil
	}
	if p.LocalInvFreq == nil {
		return nil, errors.New("backend: a layer asks for local rotary angles the plan does not have (Plan.LocalInvFreq)")
	}
	return p.LocalRope, nil
}

// appendPath appends the cache positions of node i's ancestors in the batch, root
// first, and of node i itself, for a batch appended at base.
func appendPath(dst []int32, t batch.Tree, i, base int) []int32 {
	start := len(dst)
	for a := int32(i); a >= 0; a = t.Parent(int(a)) {
		dst = append(dst, int32(base)+a)
	}
	for l, r := start, len(dst)-1; l < r; l, r = l+1, r-1 {
		dst[l], dst[r] = dst[r], dst[l]
	}
	return dst
}

// appendRope appends the cosines and then the sines of the rotation at position pos,
// multiplied by scale unless it is 0.
func appendRope(dst []float32, pos int, invFreq []float64, scale float32) []float32 {
	n := len(dst)
	half := len(invFreq)
	dst = slices.Grow(dst, 2*half)[:n+2*half]
	m := 1.0
	if scale != 0 {
		m = float64(scale)
	}
	for j, f := range invFreq {
		sin, cos := math.Sincos(float64(pos) * f)
		dst[n+j], dst[n+half+j] = float32(cos*m), float32(sin*m)
	}
	return dst
}

// Rope rotates one head's vector x in place by the angles whose cosines and sines are
// given (one per rotated pair), in the layout style. It is the definition every
// backend's rotation follows.
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
