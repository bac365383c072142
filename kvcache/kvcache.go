// Package kvcache is a paged key/value cache for a CPU transformer runtime.
//
// A [Pool] owns all key/value memory: a fixed number of blocks of [Config.BlockSize]
// token positions each, as many as a memory budget in bytes allows. A [Seq] is one
// request's cache: a length and a block table that maps the sequence's logical blocks
// (positions i*BlockSize … (i+1)*BlockSize-1) to physical blocks of the pool.
// Sequences grow, shrink, fork and keep one path of a tree draft without moving the
// data of other positions.
//
// # Layout
//
// A block is one contiguous []float32. It holds, for every layer l, kind (0 = keys,
// 1 = values) and key/value head h, in that order (layer slowest, head fastest), one
// contiguous run of BlockSize × HeadDim floats, slot-major: the vector of the block's
// slot s occupies [s*HeadDim, (s+1)*HeadDim) of the run. So the keys of one layer and
// head for the BlockSize positions of a block are one contiguous BlockSize×HeadDim
// matrix, which is what attention reads ([Seq.Block]); the values follow KVHeads runs
// later. With [Config.KeysTransposed] the key runs are dimension-major instead
// (element d of slot s at d*BlockSize + s), for kernels that score a block's positions
// one per vector lane; the value runs stay slot-major.
//
//	block b = [ l0 K h0 | l0 K h1 | … | l0 V h0 | l0 V h1 | … | l1 K h0 | … ]
//	run     = [ slot 0: HeadDim floats | slot 1 | … | slot BlockSize-1 ]
//
// A block's memory is allocated the first time the block is handed out and kept for
// reuse after it is freed; freed blocks are handed out again last-in first-out. So
// [NewPool] allocates only bookkeeping (a few bytes per block), and the memory a pool holds
// follows the most blocks that were ever in use at once ([Stats].ResidentBytes), not
// the budget. (One budget-sized allocation would not do: the Go runtime zeroes a large
// allocation, making all of it resident at once, whenever it reuses any heap pages for
// it — after as little as a few megabytes of earlier garbage.)
//
// # Sharing and copy-on-write
//
// [Seq.Fork] makes a second sequence that shares every block of the first: each block
// carries a reference count (the number of sequences whose tables hold it), and no data
// is copied. A block is copied only when a sequence is about to write into a block that
// another sequence also holds:
//
//   - [Seq.Grow] copies the partly filled last block before the new positions are
//     written into it; blocks for the new positions beyond it are fresh.
//   - [Seq.Move] and [Seq.Retain] copy each destination block that is shared.
//
// After Grow returns, every block that covers a position at or beyond the old length
// belongs to the sequence alone, so the caller may write those positions through
// [Seq.Row] without further checks. Writes to any other position are not allowed: the
// block may be shared, and the write would show through in the other sequences.
// [Seq.Truncate] and [Seq.Close] drop references; a block returns to the pool's free
// list when no sequence holds it any more.
//
// # Concurrency
//
// A Pool is safe for concurrent use: one mutex guards the free list and the reference
// counts. It is taken when blocks are allocated, shared or released, never by
// [Seq.Row] and [Seq.Block], and by [Seq.Grow] only when the sequence needs a new block
// or may have to copy one. A Seq is not safe for concurrent mutation; while nobody
// mutates it, any number of goroutines may read it through Row, Block, Len and Blocks.
// Different sequences of one pool may be used from different goroutines freely, also
// when they share blocks.
package kvcache

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
)

// DefaultBlockSize is the number of token positions per block used when
// [Config.BlockSize] is 0.
const DefaultBlockSize = 16

// ErrOutOfMemory is returned (wrapped) when an operation needs more blocks than the pool
// has free. Nothing was changed; memory comes back as other sequences shrink or close.
var ErrOutOfMemory = errors.New("kvcache: key/value memory exhausted")

// ErrClosed is returned (wrapped) when a closed sequence is grown, truncated, forked or
// rearranged.
var ErrClosed = errors.New("kvcache: sequence is closed")

// Config sets the shape of a [Pool]'s blocks and its memory budget.
type Config struct {
	// Layers is the number of transformer layers (> 0).
	Layers int
	// KVHeads is the number of key/value heads per layer (> 0).
	KVHeads int
	// HeadDim is the length of one head's key (and value) vector (> 0).
	HeadDim int
	// BlockSize is the number of token positions per block; 0 means
	// [DefaultBlockSize].
	BlockSize int
	// Budget is the most memory, in bytes, the pool may hold (> 0). The pool has
	// Budget / BlockBytes blocks, which must be at least one.
	Budget int64
	// KeysTransposed stores the keys of a run dimension-major: element d of slot s at
	// d·BlockSize + s, so that a block's keys of one head are a HeadDim × BlockSize
	// matrix whose rows hold one dimension of BlockSize positions — what a vector of
	// attention scores, one position per lane, reads. Values stay slot-major. Keys are
	// then written with [Seq.SetKey] and read with [Seq.Key]; [Seq.Row] returns no key.
	KeysTransposed bool
}

// BlockBytes is the size in bytes of one block of c: Layers × 2 (keys and values) ×
// KVHeads × BlockSize × HeadDim float32 values. It is 0 when c is not valid.
func (c Config) BlockBytes() int64 {
	_, floats, err := c.shape()
	if err != nil {
		return 0
	}
	return int64(floats) * 4
}

// shape returns c with defaults filled in and the number of floats of one block.
func (c Config) shape() (Config, int, error) {
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"Layers", c.Layers}, {"KVHeads", c.KVHeads}, {"HeadDim", c.HeadDim}, {"BlockSize", c.BlockSize}} {
		if f.v <= 0 {
			return c, 0, fmt.Errorf("kvcache: Config.%s is %d, must be > 0", f.name, f.v)
		}
	}
	// Floats per block, checked so that the size in bytes fits an int.
	floats := 1
	for _, v := range []int{c.Layers, 2, c.KVHeads, c.BlockSize, c.HeadDim} {
		if floats > math.MaxInt/4/v {
			return c, 0, fmt.Errorf("kvcache: one block of %d layers × 2 × %d KV heads × %d positions × %d floats does not fit in memory",
				c.Layers, c.KVHeads, c.BlockSize, c.HeadDim)
		}
		floats *= v
	}
	return c, floats, nil
}

// Stats is a snapshot of a [Pool]'s memory use.
type Stats struct {
	// Blocks is the number of blocks in the pool.
	Blocks int
	// FreeBlocks is the number of blocks no sequence holds.
	FreeBlocks int
	// SharedBlocks is the number of blocks held by more than one sequence.
	SharedBlocks int
	// BlockSize is the number of token positions per block.
	BlockSize int
	// BlockBytes is the size of one block in bytes.
	BlockBytes int64
	// InUseBytes is the memory of the blocks that some sequence holds.
	InUseBytes int64
	// ResidentBytes is the memory allocated for blocks so far: blocks get their
	// memory when first handed out and keep it, so this is the most ever in use at
	// once, never more than Blocks × BlockBytes.
	ResidentBytes int64
	// Budget is the configured memory budget in bytes; Blocks × BlockBytes is at most
	// Budget.
	Budget int64
}

// Pool is a fixed set of key/value blocks shared by many sequences. It is safe for
// concurrent use.
type Pool struct {
	cfg         Config
	blockFloats int // floats per block
	runFloats   int // floats per (layer, kind, head) run: BlockSize × HeadDim
	vOffset     int // floats from a key run to the value run of the same layer and head
	runs        int // runs per block: Layers × 2 × KVHeads

	// blocks[b] is block b's memory, nil until b is first handed out. Only the
	// goroutine that took b from the free list sets it, before b is used; the mutex
	// orders that against every later holder of b.
	blocks   [][]float32
	resident atomic.Int64 // blocks with memory

	mu     sync.Mutex
	refs   []int32 // per block: how many sequence tables hold it
	free   []int32 // stack of free blocks; the last one is handed out next
	shared int     // blocks with refs > 1
}

// NewPool makes a pool for c. It allocates only bookkeeping (a few bytes per block);
// each block's memory is allocated the first time a sequence takes the block, so a
// generous budget costs nothing until it is used. The budget should still be memory
// the machine has: when the Go runtime cannot allocate a block it stops the program
// rather than returning an error.
func NewPool(c Config) (*Pool, error) {
	c, floats, err := c.shape()
	if err != nil {
		return nil, err
	}
	if c.Budget <= 0 {
		return nil, fmt.Errorf("kvcache: Config.Budget is %d bytes, must be > 0", c.Budget)
	}
	blockBytes := int64(floats) * 4
	n := c.Budget / blockBytes
	if n < 1 {
		return nil, fmt.Errorf("kvcache: budget of %d bytes is smaller than one block of %d bytes (%d layers × 2 × %d KV heads × %d positions × %d floats × 4 bytes)",
			c.Budget, blockBytes, c.Layers, c.KVHeads, c.BlockSize, c.HeadDim)
	}
	// The budget is an upper bound: stay within what block ids and one slice can address.
	n = min(n, math.MaxInt32, int64(math.MaxInt/floats))
	p := &Pool{
		cfg:         c,
		blockFloats: floats,
		runFloats:   c.BlockSize * c.HeadDim,
		vOffset:     c.KVHeads * c.BlockSize * c.HeadDim,
		runs:        c.Layers * 2 * c.KVHeads,
		blocks:      make([][]float32, n),
		refs:        make([]int32, n),
		free:        make([]int32, n),
	}
	for i := range p.free {
		p.free[i] = int32(int(n) - 1 - i) // block 0 is handed out first
	}
	return p, nil
}

// Config returns the pool's configuration with defaults filled in.
func (p *Pool) Config() Config { return p.cfg }

// Stats returns a snapshot of the pool's memory use.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	free, shared := len(p.free), p.shared
	p.mu.Unlock()
	bb := int64(p.blockFloats) * 4
	return Stats{
		Blocks:        len(p.refs),
		FreeBlocks:    free,
		SharedBlocks:  shared,
		BlockSize:     p.cfg.BlockSize,
		BlockBytes:    bb,
		InUseBytes:    int64(len(p.refs)-free) * bb,
		ResidentBytes: p.resident.Load() * bb,
		Budget:        p.cfg.Budget,
	}
}

// NewSeq starts an empty sequence that takes its blocks from p.
func (p *Pool) NewSeq() *Seq { return &Seq{pool: p} }

// oom builds the error for an operation (described by what) that needs need blocks
// while only free are free.
func (p *Pool) oom(what string, need, free int) error {
	return fmt.Errorf("%w: %s needs %d blocks, %d of %d are free (budget %d bytes, %d bytes per block)",
		ErrOutOfMemory, what, need, free, len(p.refs), p.cfg.Budget, int64(p.blockFloats)*4)
}

// alloc pops a free block with reference count 1. p.mu must be held and a block must
// be free.
func (p *Pool) alloc() int32 {
	b := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	p.refs[b] = 1
	return b
}

// materialize gives block b its memory if it has none yet. It is called by the
// goroutine that just took b from the free list, without the lock.
func (p *Pool) materialize(b int32) {
	if p.blocks[b] == nil {
		p.blocks[b] = make([]float32, p.blockFloats)
		p.resident.Add(1)
	}
}

// retain adds a reference to b. p.mu must be held.
func (p *Pool) retain(b int32) {
	p.refs[b]++
	if p.refs[b] == 2 {
		p.shared++
	}
}

// release drops a reference to b and frees it when it was the last. p.mu must be held.
func (p *Pool) release(b int32) {
	p.refs[b]--
	switch p.refs[b] {
	case 1:
		p.shared--
	case 0:
		p.free = append(p.free, b) // never grows: the free list had room for every block
	}
}

// copyBlock copies the first slots positions of every run of block src into block dst.
// src must not be written meanwhile (it may be read), and dst must be exclusively owned.
func (p *Pool) copyBlock(dst, src int32, slots int) {
	d, s := p.blocks[dst], p.blocks[src]
	if slots >= p.cfg.BlockSize {
		copy(d, s)
		return
	}
	p.copySlots(d, s, 0, 0, slots)
}

// copySlots copies n slots of every run of block s, from slot from on, to block d at
// slot to, in either layout.
func (p *Pool) copySlots(d, s []float32, to, from, n int) {
	bs, hd := p.cfg.BlockSize, p.cfg.HeadDim
	for r, off := 0, 0; r < p.runs; r, off = r+1, off+p.runFloats {
		if !p.transposed(r) {
			copy(d[off+to*hd:off+(to+n)*hd], s[off+from*hd:off+(from+n)*hd])
			continue
		}
		for e := off; e < off+p.runFloats; e += bs {
			copy(d[e+to:e+to+n], s[e+from:e+from+n])
		}
	}
}

// transposed reports whether run r of a block (in the order layer, kind, head) holds
// keys stored dimension-major.
func (p *Pool) transposed(r int) bool {
	return p.cfg.KeysTransposed && r/p.cfg.KVHeads%2 == 0
}

// runOffset is where the key run of one layer and head begins in a block.
func (p *Pool) runOffset(layer, head int) int {
	return (layer*2*p.cfg.KVHeads + head) * p.runFloats
}
