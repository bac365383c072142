package cpu

import (
	"sync/atomic"

	"github.com/specula/specula/backend"
)

// store is the CPU backend's key/value memory: one []float32 per block, allocated the
// first time the block is written and kept for reuse after it is freed, so that the
// memory held follows the most blocks ever in use at once, not the budget. (One
// budget-sized allocation would not do: the Go runtime zeroes a large allocation,
// making all of it resident at once, whenever it reuses any heap pages for it.)
//
// A block holds, for every layer l of the pool's (its place among them), kind (0 keys, 1 values) and key/value head h, in
// that order, one run of BlockSize × HeadDim floats. Value runs are slot-major (the
// vector of slot s at [s·HeadDim, (s+1)·HeadDim)); key runs are dimension-major
// (element d of slot s at d·BlockSize + s), so that a vector of attention scores, one
// position per lane, reads one row of them.
//
//	block b = [ l0 K h0 | l0 K h1 | … | l0 V h0 | l0 V h1 | … | l1 K h0 | … ]
//
// Only a block's holders touch it, and the books hand a block to one holder before
// any other can share it, so the goroutine that allocates a block's memory is the only
// one that can see it then.
type store struct {
	bs, hd, kvHeads int
	runFloats       int // BlockSize × HeadDim
	runs            int // runs per block: Layers × 2 × KVHeads
	blocks          [][]float32
	resident        atomic.Int64
}

// newStore makes the storage of layers layers of a model of shape s.
func newStore(s backend.Shape, blockSize, layers int) *store {
	return &store{bs: blockSize, hd: s.HeadDim, kvHeads: s.KVHeads, runFloats: blockSize * s.HeadDim,
		runs: layers * 2 * s.KVHeads}
}

// blockBytes is the memory of one block.
func (s *store) blockBytes() int64 { return int64(s.runs) * int64(s.runFloats) * 4 }

// grow makes room for n blocks.
func (s *store) grow(n int) { s.blocks = make([][]float32, n) }

// ResidentBytes is the memory the blocks hold so far (kvcache's Stats reports it).
func (s *store) ResidentBytes() int64 { return s.resident.Load() * s.blockBytes() }

// block returns block b's memory, allocating it the first time.
func (s *store) block(b int32) []float32 {
	if s.blocks[b] == nil {
		s.blocks[b] = make([]float32, s.runs*s.runFloats)
		s.resident.Add(1)
	}
	return s.blocks[b]
}

// run is where the key run of one layer and head begins in a block; the value run
// is kvHeads runs later.
func (s *store) run(layer, head int) int { return (layer*2*s.kvHeads + head) * s.runFloats }

// Copy implements kvcache.Storage.
func (s *store) Copy(pairs []int32) error {
	for k := 0; k+1 < len(pairs); k += 2 {
		dst, src := pairs[k], pairs[k+1]
		d, sb := s.block(dst/int32(s.bs)), s.block(src/int32(s.bs))
		to, from := int(dst)%s.bs, int(src)%s.bs
		for r, off := 0, 0; r < s.runs; r, off = r+1, off+s.runFloats {
			if r/s.kvHeads%2 == 1 { // a value run: slot-major
				copy(d[off+to*s.hd:off+(to+1)*s.hd], sb[off+from*s.hd:off+(from+1)*s.hd])
				continue
			}
			for e := off; e < off+s.runFloats; e += s.bs {
				d[e+to] = sb[e+from]
			}
		}
	}
	return nil
}

// put stores the key and value vectors of one layer and head at a slot.
func (s *store) put(slot int32, layer, head int, k, v []float32) {
	blk := s.block(slot / int32(s.bs))
	off, at := s.run(layer, head), int(slot)%s.bs
	for d, x := range k[:s.hd] {
		blk[off+d*s.bs+at] = x
	}
	voff := off + s.kvHeads*s.runFloats + at*s.hd
	copy(blk[voff:voff+s.hd], v)
}

// kv returns block b's key run (dimension-major) and value run for one layer and
// head.
func (s *store) kv(b int32, layer, head int) (k, v []float32) {
	blk := s.blocks[b]
	off := s.run(layer, head)
	voff := off + s.kvHeads*s.runFloats
	return blk[off : off+s.runFloats : off+s.runFloats], blk[voff : voff+s.runFloats : voff+s.runFloats]
}

// key copies the key of one layer and head at a slot into dst.
func (s *store) key(slot int32, layer, head int, dst []float32) {
	blk := s.blocks[slot/int32(s.bs)]
	off, at := s.run(layer, head), int(slot)%s.bs
	for d := range dst[:s.hd] {
		dst[d] = blk[off+d*s.bs+at]
	}
}

// value returns the value of one layer and head at a slot.
func (s *store) value(slot int32, layer, head int) []float32 {
	blk := s.blocks[slot/int32(s.bs)]
	voff := s.run(layer, head) + s.kvHeads*s.runFloats + int(slot)%s.bs*s.hd
	return blk[voff : voff+s.hd : voff+s.hd]
}
