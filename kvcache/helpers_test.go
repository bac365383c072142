package kvcache

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// check verifies the pool's bookkeeping against the live sequences seqs, which must be
// every open sequence of p: each block's reference count equals the number of tables
// that hold it, free blocks have count 0 and appear once on the free list, the shared
// and resident counters match, every held block has its memory, and each sequence's
// table has the right length and holds its exclusively owned blocks alone.
func (p *Pool) check(seqs ...*Seq) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	want := make([]int32, len(p.refs))
	for si, s := range seqs {
		if s == nil || s.pool == nil {
			continue
		}
		if s.pool != p {
			return fmt.Errorf("sequence %d belongs to another pool", si)
		}
		bs := p.cfg.BlockSize
		if got, exp := len(s.table), (s.n+bs-1)/bs; got != exp {
			return fmt.Errorf("sequence %d: %d positions in %d blocks, want %d blocks", si, s.n, got, exp)
		}
		if s.owned < 0 || s.owned > len(s.table) {
			return fmt.Errorf("sequence %d: owned = %d outside [0, %d]", si, s.owned, len(s.table))
		}
		seen := map[int32]bool{}
		for i, b := range s.table {
			if b < 0 || int(b) >= len(p.refs) {
				return fmt.Errorf("sequence %d: block %d is %d, outside the pool", si, i, b)
			}
			if seen[b] {
				return fmt.Errorf("sequence %d holds block %d twice", si, b)
			}
			seen[b] = true
			want[b]++
		}
	}
	inFree := make([]bool, len(p.refs))
	for _, b := range p.free {
		if inFree[b] {
			return fmt.Errorf("block %d is on the free list twice", b)
		}
		inFree[b] = true
	}
	shared, resident := 0, 0
	for b, mem := range p.blocks {
		if mem != nil {
			resident++
			if len(mem) != p.blockFloats {
				return fmt.Errorf("block %d has %d floats, want %d", b, len(mem), p.blockFloats)
			}
		} else if p.refs[b] > 0 {
			return fmt.Errorf("block %d is held by %d sequences but has no memory", b, p.refs[b])
		}
	}
	if got := p.resident.Load(); got != int64(resident) {
		return fmt.Errorf("resident counter %d, %d blocks have memory", got, resident)
	}
	for b, r := range p.refs {
		if r != want[b] {
			return fmt.Errorf("block %d: reference count %d, held by %d sequences", b, r, want[b])
		}
		if (r == 0) != inFree[b] {
			return fmt.Errorf("block %d: reference count %d, on free list %v", b, r, inFree[b])
		}
		if r > 1 {
			shared++
		}
	}
	if shared != p.shared {
		return fmt.Errorf("shared counter %d, %d blocks are shared", p.shared, shared)
	}
	for si, s := range seqs {
		if s == nil || s.pool == nil {
			continue
		}
		for i := s.owned; i < len(s.table); i++ {
			if r := p.refs[s.table[i]]; r != 1 {
				return fmt.Errorf("sequence %d: block %d (pool block %d) counted as its own has %d references", si, i, s.table[i], r)
			}
		}
	}
	return nil
}

// val is the float stored for write id at flat index j (run × HeadDim + d) of a
// position: a distinct bit pattern for each (id, j), compared bit for bit.
func val(id uint32, j int) float32 { return math.Float32frombits(id<<10 | uint32(j)) }

// write stores id's values at every layer, kind and head of position pos of s.
func write(s *Seq, pos int, id uint32) {
	c := s.pool.cfg
	for l := range c.Layers {
		for h := range c.KVHeads {
			k, v := s.Row(l, h, pos)
			kr, vr := (l*2)*c.KVHeads+h, (l*2+1)*c.KVHeads+h
			for d := range c.HeadDim {
				k[d] = val(id, kr*c.HeadDim+d)
				v[d] = val(id, vr*c.HeadDim+d)
			}
		}
	}
}

// verify checks that s holds exactly the values written for ids, position by
// position, through both Row and Block.
func verify(t testing.TB, s *Seq, ids []uint32) {
	t.Helper()
	require.Equal(t, len(ids), s.Len(), "length")
	c := s.pool.cfg
	bs := c.BlockSize
	require.Equal(t, (len(ids)+bs-1)/bs, s.Blocks(), "blocks")
	for l := range c.Layers {
		for h := range c.KVHeads {
			kr, vr := (l*2)*c.KVHeads+h, (l*2+1)*c.KVHeads+h
			for pos, id := range ids {
				k, v := s.Row(l, h, pos)
				bk, bv := s.Block(l, h, pos/bs)
				if len(k) != c.HeadDim || len(v) != c.HeadDim || cap(k) != c.HeadDim || cap(v) != c.HeadDim ||
					len(bk) != bs*c.HeadDim || len(bv) != bs*c.HeadDim {
					t.Fatalf("layer %d head %d pos %d: Row lengths %d, %d (caps %d, %d), Block lengths %d, %d",
						l, h, pos, len(k), len(v), cap(k), cap(v), len(bk), len(bv))
				}
				o := pos % bs * c.HeadDim
				for d := range c.HeadDim {
					if k[d] != val(id, kr*c.HeadDim+d) || v[d] != val(id, vr*c.HeadDim+d) ||
						bk[o+d] != k[d] || bv[o+d] != v[d] {
						t.Fatalf("layer %d head %d pos %d dim %d: got k=%#x v=%#x (block k=%#x v=%#x), want write %d",
							l, h, pos, d, math.Float32bits(k[d]), math.Float32bits(v[d]),
							math.Float32bits(bk[o+d]), math.Float32bits(bv[o+d]), id)
					}
				}
			}
		}
	}
}

// newPool makes a pool of the given shape with room for exactly blocks blocks.
func newPool(t testing.TB, layers, heads, dim, bs, blocks int) *Pool {
	t.Helper()
	c := Config{Layers: layers, KVHeads: heads, HeadDim: dim, BlockSize: bs}
	c.Budget = c.BlockBytes() * int64(blocks)
	p, err := NewPool(c)
	require.NoError(t, err)
	require.Equal(t, blocks, p.Stats().Blocks)
	return p
}
