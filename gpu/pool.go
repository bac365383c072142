package gpu

import (
	"fmt"
	"slices"

	"github.com/specula/specula/kvcache"
	"github.com/specula/specula/model"
)

// blockPool hands out the blocks of a model's device key/value pool and counts their
// references. It only keeps the books: the data moves by kvCopy on the device, in the
// order the pool asks for. Not safe for concurrent use: the Device's lock guards it.
type blockPool struct {
	geom   kvGeom
	refs   []int32 // per block: how many sequence tables hold it
	free   []int32 // stack of free blocks; the last one is handed out next
	shared int     // blocks with refs > 1
	budget int64
}

func newBlockPool(geom kvGeom, blocks int, budget int64) *blockPool {
	p := &blockPool{geom: geom, refs: make([]int32, blocks), free: make([]int32, blocks), budget: budget}
	for i := range p.free {
		p.free[i] = int32(blocks - 1 - i) // block 0 first
	}
	return p
}

func (p *blockPool) blockBytes() int64 { return 4 * p.geom.blockFloats() }

func (p *blockPool) stats() kvcache.Stats {
	bb := p.blockBytes()
	n := len(p.refs)
	return kvcache.Stats{
		Blocks: n, FreeBlocks: len(p.free), SharedBlocks: p.shared, BlockSize: p.geom.blockSize,
		BlockBytes: bb, InUseBytes: int64(n-len(p.free)) * bb, ResidentBytes: int64(n) * bb, Budget: p.budget,
	}
}

func (p *blockPool) oom(what string, need int) error {
	return fmt.Errorf("gpu: %w: %w: %s needs %d blocks, %d of %d are free (budget %d bytes, %d bytes per block)",
		model.ErrOutOfMemory, kvcache.ErrOutOfMemory, what, need, len(p.free), len(p.refs), p.budget, p.blockBytes())
}

func (p *blockPool) alloc() int32 {
	b := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	p.refs[b] = 1
	return b
}

func (p *blockPool) retain(b int32) {
	p.refs[b]++
	if p.refs[b] == 2 {
		p.shared++
	}
}

func (p *blockPool) release(b int32) {
	p.refs[b]--
	switch p.refs[b] {
	case 1:
		p.shared--
	case 0:
		p.free = append(p.free, b)
	}
}

// seqKV is one sequence's block table and length.
type seqKV struct {
	p     *blockPool
	table []int32 // logical block i → pool block
	n     int
}

// slot is the physical slot index of position pos.
func (s *seqKV) slot(pos int) int32 {
	bs := s.p.geom.blockSize
	return s.table[pos/bs]*int32(bs) + int32(pos%bs)
}

// copyBlock appends to pairs the copies of the first slots positions of block src into
// block dst.
func (s *seqKV) copyBlock(pairs []int32, dst, src int32, slots int) []int32 {
	bs := int32(s.p.geom.blockSize)
	for j := range int32(slots) {
		pairs = append(pairs, dst*bs+j, src*bs+j)
	}
	return pairs
}

// grow extends the sequence by n positions. A partly filled last block that another
// sequence shares is replaced by a copy first: the copies to make on the device, in
// order, are appended to pairs (destination and source slots). All or nothing.
func (s *seqKV) grow(n int, pairs []int32) ([]int32, error) {
	bs := s.p.geom.blockSize
	newLen := s.n + n
	add := (newLen+bs-1)/bs - len(s.table)
	last := len(s.table) - 1
	cow := s.n%bs != 0 && s.p.refs[s.table[last]] > 1
	need := add
	if cow {
		need++
	}
	if need > len(s.p.free) {
		return pairs, s.p.oom(fmt.Sprintf("growing from %d to %d positions", s.n, newLen), need)
	}
	if cow {
		fresh, old := s.p.alloc(), s.table[last]
		pairs = s.copyBlock(pairs, fresh, old, s.n%bs)
		s.table[last] = fresh
		s.p.release(old) // the copy runs before anything can reuse old: one stream
	}
	for range add {
		s.table = append(s.table, s.p.alloc())
	}
	s.n = newLen
	return pairs, nil
}

// truncate shrinks the sequence to n positions.
func (s *seqKV) truncate(n int) {
	bs := s.p.geom.blockSize
	keep := (n + bs - 1) / bs
	for _, b := range s.table[keep:] {
		s.p.release(b)
	}
	s.table = s.table[:keep]
	s.n = n
}

// fork returns a sequence sharing every block of s.
func (s *seqKV) fork() *seqKV {
	for _, b := range s.table {
		s.p.retain(b)
	}
	return &seqKV{p: s.p, table: slices.Clone(s.table), n: s.n}
}

// retain keeps, of the positions from, from+1, …, those at the offsets keep (strictly
// ascending), moving position from+keep[i] to from+i, then truncates to
// from+len(keep). Shared destination blocks are replaced by copies first. The copies
// to make, in order, are appended to pairs. All or nothing.
func (s *seqKV) retain(from int, keep []int32, pairs []int32) ([]int32, error) {
	first := len(keep)
	for i, k := range keep {
		if int(k) != i {
			first = i
			break
		}
	}
	if first < len(keep) {
		bs := s.p.geom.blockSize
		lo, hi := (from+first)/bs, (from+len(keep)-1)/bs
		need := 0
		for _, b := range s.table[lo : hi+1] {
			if s.p.refs[b] > 1 {
				need++
			}
		}
		if need > len(s.p.free) {
			return pairs, s.p.oom(fmt.Sprintf("keeping %d of the positions after %d", len(keep), from), need)
		}
		for i := lo; i <= hi; i++ {
			if old := s.table[i]; s.p.refs[old] > 1 {
				fresh := s.p.alloc()
				pairs = s.copyBlock(pairs, fresh, old, min(bs, s.n-i*bs))
				s.table[i] = fresh
				s.p.release(old)
			}
		}
		// Ascending order is safe: each destination lies below every later source.
		for i := first; i < len(keep); i++ {
			pairs = append(pairs, s.slot(from+i), s.slot(from+int(keep[i])))
		}
	}
	s.truncate(from + len(keep))
	return pairs, nil
}

// close returns every block.
func (s *seqKV) close() {
	s.truncate(0)
}
