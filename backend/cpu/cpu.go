// Package cpu is the CPU backend: the operations of a Llama-family layer on host
// memory, run by the SIMD kernels of internal/kernels on a pool of threads, with the
// key/value blocks in host memory.
//
// Products on quantised weights run on activations quantised per row to 8-bit blocks
// with integer dot products, in one summation order for every batch size, and
// attention computes each row by the same calls whatever else is in the pass: a
// token's logits do not depend on the batch around it.
package cpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/internal/kernels"
	"github.com/specula/specula/kvcache"
)

// Backend runs passes of one model shape on the CPU. It is safe for concurrent use:
// passes of different goroutines take turns on the threads, op by op.
type Backend struct {
	shape backend.Shape
	pool  *Pool
	own   bool          // the pool is the backend's own: Close stops it
	kv    [2]*store     // the first pool's storage and the sliding layers' (backend.KVSpec)
	kvmap backend.KVMap // which pool, and which of its layers, each layer is

	passes sync.Pool // *pass: the scratch of finished passes, for the next
}

// New makes a CPU backend for models of the given shape, on a pool of threads
// threads of its own (0 means GOMAXPROCS), which its Close stops.
func New(shape backend.Shape, threads int) *Backend {
	b := newOn(shape, NewPool(threads))
	b.own = true
	return b
}

// newOn makes a backend on the threads of pool.
func newOn(shape backend.Shape, pool *Pool) *Backend {
	b := &Backend{shape: shape, pool: pool}
	b.passes.New = func() any { return &pass{b: b, scores: make(chan []float32, pool.Threads())} }
	return b
}

// Factory makes CPU backends on threads threads (0 means GOMAXPROCS), one for each
// model it is given to, each with threads of its own: llama.Open(path,
// cpu.Factory(0), llama.Options{}). A program that runs several models (a target and
// its drafters) gives them one [Pool] instead ([Pool.Factory]).
func Factory(threads int) backend.Factory {
	return func(shape backend.Shape) (backend.Backend, error) { return New(shape, threads), nil }
}

// Pool is threads that CPU backends run their products on. An engine makes one and
// makes every CPU backend on it ([Pool.Factory]) — the target's, a draft model's, an
// EAGLE layer's, and so a trained head's products, which run on the target's backend:
// idle threads spin a while before they sleep, so models with pools of their own
// would hold several pools of spinning threads fighting over the cores. Passes of
// different backends and goroutines share it: a product that finds the threads busy
// with another runs on its own goroutine beside it.
type Pool struct{ k *kernels.Pool }

// NewPool starts a pool of the given number of threads (0 means GOMAXPROCS).
func NewPool(threads int) *Pool { return &Pool{k: kernels.NewPool(threads)} }

// Threads is the number of threads of the pool.
func (p *Pool) Threads() int { return p.k.Threads() }

// Factory makes CPU backends on the pool, one for each model it is given to. Their
// Close leaves the pool running: its owner closes it after them.
func (p *Pool) Factory() backend.Factory {
	return func(shape backend.Shape) (backend.Backend, error) { return newOn(shape, p), nil }
}

// Close stops the threads. The backends on the pool must be closed first.
func (p *Pool) Close() error {
	p.k.Close()
	return nil
}

// Name implements [backend.Backend].
func (b *Backend) Name() string { return "cpu " + kernels.Name() }

// MaxRows implements [backend.Backend]: a pass takes any number of rows.
func (b *Backend) MaxRows() int { return 0 }

// Pool is the threads the backend runs on: its own, or the pool it was made on.
func (b *Backend) Pool() *Pool { return b.pool }

// Close implements [backend.Backend]: it stops the backend's threads if they are its
// own.
func (b *Backend) Close() error {
	if b.own {
		return b.pool.Close()
	}
	return nil
}

// matrix is one or more kernel matrices side by side.
type matrix struct {
	parts []*kernels.Matrix
	offs  []int // each part's first output column
	// inputs are the column orders of the parts, each once (nil: the inputs' own
	// order); part i reads the activations gathered by inputs[input[i]].
	inputs [][]int32
	input  []int
	rows   int
	bytes  int64
}

// permuted reports whether a part's columns are not in the inputs' order.
func (m *matrix) permuted() bool {
	return slices.ContainsFunc(m.inputs, func(p []int32) bool { return p != nil })
}

func (m *matrix) Rows() int    { return m.rows }
func (m *matrix) Bytes() int64 { return m.bytes }

// Footprint implements [backend.Footprinter]: every weight is a repacked copy, none is
// read from the file's mapping; large parts lie in anonymous mappings of whole huge
// pages, small ones on the Go heap.
func (m *matrix) Footprint() backend.Footprint {
	var f backend.Footprint
	for _, k := range m.parts {
		n, heap := k.Footprint()
		if heap {
			f.Heap += n
		} else {
			f.Anon += n
		}
	}
	return f
}

// vector is a float32 vector in host memory.
type vector []float32

func (v vector) Len() int { return len(v) }

// Matrix implements [backend.Backend]: each part is repacked into the kernels' layout.
// Parts with equal column orders (Tensor.Perm) share one gathered input.
func (b *Backend) Matrix(parts ...backend.Tensor) (backend.Matrix, error) {
	if len(parts) == 0 || len(parts) > kernels.MaxParts {
		return nil, fmt.Errorf("cpu: a matrix of %d parts; 1 to %d", len(parts), kernels.MaxParts)
	}
	m := &matrix{}
	for _, t := range parts {
		if t.Cols != parts[0].Cols {
			return nil, fmt.Errorf("cpu: tensor %q has %d columns, %q has %d", t.Name, t.Cols, parts[0].Name, parts[0].Cols)
		}
		if err := t.CheckPerm(); err != nil {
			return nil, fmt.Errorf("cpu: %w", err)
		}
		k, err := kernels.NewMatrix(t.Type, t.Rows, t.Cols, t.Data)
		if err != nil {
			return nil, fmt.Errorf("cpu: tensor %q: %w", t.Name, err)
		}
		in := slices.IndexFunc(m.inputs, func(p []int32) bool { return backend.SamePerm(p, t.Perm) })
		if in < 0 {
			in = len(m.inputs)
			m.inputs = append(m.inputs, slices.Clone(t.Perm))
		}
		m.input = append(m.input, in)
		m.parts = append(m.parts, k)
		m.offs = append(m.offs, m.rows)
		m.rows += t.Rows
		m.bytes += int64(len(k.Data))
	}
	return m, nil
}

// Vector implements [backend.Backend].
func (b *Backend) Vector(v []float32) (backend.Vector, error) {
	return vector(append([]float32(nil), v...)), nil
}

// KV implements [backend.Backend]: blocks in host memory, each allocated the first
// time it is written.
func (b *Backend) KV(spec backend.KVSpec) (*kvcache.Pool, error) {
	blockSize := spec.BlockSize
	if blockSize == 0 {
		blockSize = kvcache.DefaultBlockSize
	}
	if blockSize != attnBlock {
		return nil, fmt.Errorf("cpu: key/value blocks of %d positions; the attention kernels read blocks of %d", blockSize, attnBlock)
	}
	var books *kvcache.Pool
	err := b.kvmap.Add(b.shape.Layers, spec, func(pool, layers int) error {
		st := newStore(b.shape, blockSize, layers)
		p, err := kvcache.NewPool(kvcache.Config{BlockSize: blockSize, BlockBytes: st.blockBytes(), Budget: spec.Budget}, st)
		if err != nil {
			return err
		}
		st.grow(p.Stats().Blocks)
		books, b.kv[pool] = p, st
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	return books, nil
}

// layerKV returns the storage of layer's keys and values, and the layer's place in it.
func (b *Backend) layerKV(layer int) (*store, int) {
	return b.kv[b.kvmap.Pool[layer]], b.kvmap.Index[layer]
}

// Run implements [backend.Backend].
func (b *Backend) Run(ctx context.Context, p *backend.Plan, l backend.Layers) error {
	if b.kv[0] == nil && b.kv[1] == nil {
		return errors.New("cpu: the backend has no key/value cache (call KV first)")
	}
	ps := b.getPass()
	defer b.putPass(ps)
	ps.start(p)
	err := l.Layers(ctx, ps)
	if ps.err != nil {
		return ps.err
	}
	return err
}

// getPass returns the scratch of a finished pass, or a new one.
func (b *Backend) getPass() *pass {
	ps := b.passes.Get().(*pass)
	ps.err = nil
	return ps
}

// putPass keeps the scratch of a finished pass for the next.
func (b *Backend) putPass(ps *pass) {
	// No references to the caller's buffers.
	ps.plan, ps.mul = nil, kernels.Product{}
	ps.act[backend.X].Reset(nil, 0, 0)
	b.passes.Put(ps)
}

// MulRows implements [backend.Backend]: the product of a pass's Mul — the same
// kernels, summation order and column gathering — on the backend's threads, with
// the scratch of a pass.
func (b *Backend) MulRows(w backend.Matrix, x []float32, n int, y []float32) error {
	m, ok := w.(*matrix)
	if !ok {
		return errForeign
	}
	cols := m.parts[0].Cols
	if err := backend.CheckMulRows(n, m.rows, cols, x, y); err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	if n == 0 {
		return nil
	}
	ps := b.getPass()
	defer b.putPass(ps)
	ps.mulRows(y, m.rows, x, n, cols, &ps.act[backend.X], m)
	return ps.err
}

// EmbedRow implements [backend.Backend]: row i decoded as a pass's Embed decodes it.
func (b *Backend) EmbedRow(w backend.Matrix, i int, dst []float32) error {
	m, ok := w.(*matrix)
	switch {
	case !ok:
		return errForeign
	case m.permuted():
		return errPermutedTable
	}
	part, row, err := backend.TableRow(m.offs, m.rows, i)
	if err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	k := m.parts[part]
	if len(dst) != k.Cols {
		return fmt.Errorf("cpu: a row of %d values into %d", k.Cols, len(dst))
	}
	ps := b.getPass()
	defer b.putPass(ps)
	ps.rowBuf = grow(ps.rowBuf, k.RowBytes())
	if err := k.RowF32(row, dst, ps.rowBuf); err != nil {
		return fmt.Errorf("cpu: row %d: %w", i, err)
	}
	return nil
}

// errForeign is the error of a weight that another backend took in.
var errForeign = errors.New("cpu: a weight taken in by another backend")

// errPermutedTable refuses an embedding table whose columns were permuted: a row of
// it is read as it is stored, so its columns must be in the inputs' order.
var errPermutedTable = errors.New("cpu: an embedding table with its columns permuted")
