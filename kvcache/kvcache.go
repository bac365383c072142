// Package kvcache keeps the books of a paged key/value cache: which blocks of a
// backend's key/value memory each sequence holds, how many sequences hold each block,
// which blocks are free, and what must be copied when a shared block is about to be
// written. The data itself belongs to the backend (host memory for the CPU, device
// memory for a GPU); the books tell it, through [Storage], what to copy and never read
// or write it themselves.
//
// A [Pool] is a fixed number of blocks of [Config.BlockSize] token positions each, as
// many as a memory budget in bytes allows. A [Seq] is one request's cache: a length and
// a block table that maps the sequence's logical blocks (positions i·BlockSize …
// (i+1)·BlockSize−1) to physical blocks of the pool. Position pos of a sequence lives
// at physical slot table[pos/BlockSize]·BlockSize + pos%BlockSize ([Seq.Slot]), the
// address a backend stores its keys and values at. Sequences grow, shrink, fork and
// keep one path of a tree draft without moving the data of other positions.
//
// # Released positions
//
// With sliding-window attention no row sees positions more than a window behind it.
// [Seq.ReleaseBefore] gives the blocks wholly before a position back to the pool,
// leaving [Hole]s at the start of the table, so that a long generation holds about a
// window of positions, not all of them. The tokens (and so the block hashes) stay;
// [Seq.Released] is the first position whose data is still held.
//
// # Sharing and copy-on-write
//
// [Seq.Fork] makes a second sequence that shares every block of the first: each block
// carries a reference count, and no data is copied. A block is copied only when a
// sequence is about to write into a block that another sequence also holds: [Seq.Grow]
// copies a shared, partly filled last block before new positions go into it, and
// [Seq.Retain] copies each shared destination block. After Grow returns, every block
// that covers a position at or beyond the old length belongs to the sequence alone, so
// the backend may write those positions without further checks.
//
// # Prefix hashes
//
// A sequence knows the token at each of its positions (Grow takes them), and
// [Seq.BlockHash] gives each full block a hash of every token up to its end, so that two
// sequences whose blocks hash alike hold the same prefix: what a prefix cache needs to
// share blocks between requests, without touching the backends.
//
// # Concurrency
//
// A Pool is safe for concurrent use: one mutex guards the free list and the reference
// counts. It is taken when blocks are allocated, shared or released, and by Grow only
// when the sequence needs a new block or may have to copy one. A Seq is not safe for
// concurrent mutation; while nobody mutates it, any number of goroutines may read it
// (Len, Blocks, Table, Slot). Different sequences of one pool may be used from
// different goroutines freely, also when they share blocks.
package kvcache

import (
	"errors"
	"fmt"
	"math"
	"sync"
)

// DefaultBlockSize is the number of token positions per block used when
// [Config.BlockSize] is 0.
const DefaultBlockSize = 16

// ErrOutOfMemory is returned (wrapped) when an operation needs more blocks than the pool
// has free. Nothing was changed; memory comes back as other sequences shrink or close.
var ErrOutOfMemory = errors.New("key/value memory exhausted")

// ErrReleased is returned (wrapped) when an operation needs the keys and values of a
// position the sequence released ([Seq.ReleaseBefore]).
var ErrReleased = errors.New("kvcache: position released")

// Hole is the block table entry of a logical block the sequence released
// ([Seq.ReleaseBefore]), and the slot [Seq.Slot] gives a released position: no pool
// block, nothing for a backend to read.
const Hole int32 = -1

// ErrClosed is returned (wrapped) when a closed sequence is grown, truncated, forked or
// rearranged.
var ErrClosed = errors.New("kvcache: sequence is closed")

// Storage is a backend's key/value memory as the books see it: they only ever ask it
// to copy. A physical slot is block·BlockSize + offset.
type Storage interface {
	// Copy copies, pair after pair in order, everything stored for physical slot
	// pairs[2k+1] (every layer, keys and values, every head) to slot pairs[2k]. The
	// destination blocks belong to the caller alone; the sources may be read by
	// others meanwhile.
	Copy(pairs []int32) error
}

// residentReporter is a [Storage] that knows how much memory its blocks hold so far
// (one that allocates a block's memory the first time it is written); [Pool.Stats]
// reports it.
type residentReporter interface {
	ResidentBytes() int64
}

// Config sets a [Pool]'s block size and memory budget.
type Config struct {
	// BlockSize is the number of token positions per block; 0 means
	// [DefaultBlockSize].
	BlockSize int
	// BlockBytes is the memory one block takes in the backend's storage (> 0).
	BlockBytes int64
	// Budget is the most memory, in bytes, the pool may hold (> 0). The pool has
	// Budget / BlockBytes blocks, which must be at least one.
	Budget int64
}

// Blocks is the number of blocks a pool of c has, after checking c.
func (c Config) Blocks() (int, error) {
	if c.BlockSize < 0 {
		return 0, fmt.Errorf("kvcache: Config.BlockSize is %d, must be >= 0", c.BlockSize)
	}
	if c.BlockBytes <= 0 {
		return 0, fmt.Errorf("kvcache: Config.BlockBytes is %d, must be > 0", c.BlockBytes)
	}
	if c.Budget <= 0 {
		return 0, fmt.Errorf("kvcache: Config.Budget is %d bytes, must be > 0", c.Budget)
	}
	n := c.Budget / c.BlockBytes
	if n < 1 {
		return 0, fmt.Errorf("kvcache: budget of %d bytes is smaller than one block of %d bytes", c.Budget, c.BlockBytes)
	}
	bs := int64(c.BlockSize)
	if bs == 0 {
		bs = DefaultBlockSize
	}
	// Stay within what slots, block·BlockSize + offset as int32, can address.
	return int(min(n, math.MaxInt32/bs)), nil
}

// Stats is a snapshot of a [Pool]'s memory use.
type Stats struct {
	// Blocks is the number of blocks in the pool.
	Blocks int
	// FreeBlocks is the number of blocks no sequence holds (cached ones included).
	FreeBlocks int
	// SharedBlocks is the number of blocks held by more than one sequence.
	SharedBlocks int
	// BlockSize is the number of token positions per block.
	BlockSize int
	// BlockBytes is the size of one block in bytes.
	BlockBytes int64
	// InUseBytes is the memory of the blocks that some sequence holds.
	InUseBytes int64
	// ResidentBytes is the memory the storage holds: for a storage that gives a block
	// its memory when first used, the most ever in use at once; otherwise the whole
	// pool, Blocks × BlockBytes.
	ResidentBytes int64
	// Budget is the configured memory budget in bytes; Blocks × BlockBytes is at most
	// Budget.
	Budget int64
	// CachedBlocks is the number of the free blocks that still hold a published
	// prefix ([Seq.Publish]): handed out last, reusable until then.
	CachedBlocks int
	// PrefixLookups and PrefixHits count the full blocks [Seq.Reuse] looked for and
	// found.
	PrefixLookups, PrefixHits int64
}

// Pool is the books of a fixed set of key/value blocks shared by many sequences. It is
// safe for concurrent use.
type Pool struct {
	cfg     Config
	storage Storage

	mu     sync.Mutex
	refs   []int32 // per block: how many sequence tables hold it
	free   []int32 // stack of free blocks; the last one is handed out next
	shared int     // blocks with refs > 1
	prefix prefixIndex
}

// NewPool makes the books of a pool of c whose data lives in st.
func NewPool(c Config, st Storage) (*Pool, error) {
	n, err := c.Blocks()
	if err != nil {
		return nil, err
	}
	if st == nil {
		return nil, errors.New("kvcache: nil storage")
	}
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	p := &Pool{cfg: c, storage: st, refs: make([]int32, n), free: make([]int32, n), prefix: newPrefixIndex(n, c.BlockSize)}
	for i := range p.free {
		p.free[i] = int32(n - 1 - i) // block 0 is handed out first
	}
	return p, nil
}

// Config returns the pool's configuration with defaults filled in.
func (p *Pool) Config() Config { return p.cfg }

// Stats returns a snapshot of the pool's memory use.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	free, shared := p.available(), p.shared
	cached, hits, lookups := p.prefix.cached, p.prefix.hits, p.prefix.lookups
	p.mu.Unlock()
	bb := p.cfg.BlockBytes
	resident := int64(len(p.refs)) * bb
	if r, ok := p.storage.(residentReporter); ok {
		resident = r.ResidentBytes()
	}
	return Stats{
		Blocks:        len(p.refs),
		FreeBlocks:    free,
		SharedBlocks:  shared,
		BlockSize:     p.cfg.BlockSize,
		BlockBytes:    bb,
		InUseBytes:    int64(len(p.refs)-free) * bb,
		ResidentBytes: resident,
		Budget:        p.cfg.Budget,
		CachedBlocks:  cached,
		PrefixLookups: lookups,
		PrefixHits:    hits,
	}
}

// NewSeq starts an empty sequence that takes its blocks from p.
func (p *Pool) NewSeq() *Seq { return &Seq{pool: p} }

// oom builds the error for an operation (described by what) that needs need blocks
// while only free are free.
func (p *Pool) oom(what string, need, free int) error {
	return fmt.Errorf("kvcache: %w: %s needs %d blocks, %d of %d are free (budget %d bytes, %d bytes per block)",
		ErrOutOfMemory, what, need, free, len(p.refs), p.cfg.Budget, p.cfg.BlockBytes)
}

// available is the number of blocks that can be handed out: free, or cached (a
// published prefix no sequence holds, given up when needed). p.mu must be held.
func (p *Pool) available() int { return len(p.free) + p.prefix.cached }

// alloc hands out a block with reference count 1: a free one, else the least
// recently used cached one, whose prefix is then forgotten. p.mu must be held and
// available() must be positive.
func (p *Pool) alloc() int32 {
	var b int32
	if n := len(p.free); n > 0 {
		b = p.free[n-1]
		p.free = p.free[:n-1]
	} else {
		b = p.prefix.evict()
	}
	p.refs[b] = 1
	return b
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
		if p.prefix.published(b) {
			p.prefix.park(b) // reusable until its memory is needed
			return
		}
		p.free = append(p.free, b) // never grows: the free list had room for every block
	}
}

// releaseAll drops a reference to each block of bs.
func (p *Pool) releaseAll(bs []int32) {
	if len(bs) == 0 {
		return
	}
	p.mu.Lock()
	for _, b := range bs {
		p.release(b)
	}
	p.mu.Unlock()
}
