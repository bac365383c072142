package cpu

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/kvcache"
)

func testShape() backend.Shape {
	return backend.Shape{Layers: 2, Dim: 32, Heads: 4, KVHeads: 2, HeadDim: 8, FFN: 64, Vocab: 20, RopeDim: 8, NormEps: 1e-5}
}

// TestStoreCopy writes distinct keys and values at two slots of every layer and head
// and checks that Copy moves all of them, keys in their dimension-major runs.
func TestStoreCopy(t *testing.T) {
	s := testShape()
	st := newStore(s, attnBlock, s.Layers)
	st.grow(3)
	val := func(slot int32, l, h, d int) float32 { return float32(int(slot)*1000 + l*100 + h*10 + d) }
	k, v := make([]float32, s.HeadDim), make([]float32, s.HeadDim)
	for _, slot := range []int32{3, 20} {
		for l := range s.Layers {
			for h := range s.KVHeads {
				for d := range k {
					k[d], v[d] = val(slot, l, h, d), -val(slot, l, h, d)
				}
				st.put(slot, l, h, k, v)
			}
		}
	}
	require.NoError(t, st.Copy([]int32{40, 3, 5, 20})) // slot 3 → 40 (block 2), 20 → 5
	assert.Equal(t, int64(3)*st.blockBytes(), st.ResidentBytes())
	for _, c := range [][2]int32{{40, 3}, {5, 20}, {3, 3}} {
		for l := range s.Layers {
			for h := range s.KVHeads {
				st.key(c[0], l, h, k)
				got := st.value(c[0], l, h)
				for d := range k {
					require.Equal(t, val(c[1], l, h, d), k[d], "key slot %d layer %d head %d dim %d", c[0], l, h, d)
					require.Equal(t, -val(c[1], l, h, d), got[d], "value slot %d", c[0])
				}
				kb, vb := st.kv(c[0]/attnBlock, l, h)
				at := int(c[0] % attnBlock)
				require.Equal(t, k[1], kb[attnBlock+at], "the block's key run is dimension-major")
				require.Equal(t, got[1], vb[at*s.HeadDim+1], "the block's value run is slot-major")
			}
		}
	}
}

// TestBackendErrors checks what the CPU backend refuses, with errors that say why.
func TestBackendErrors(t *testing.T) {
	s := testShape()
	b := New(s, 1)
	defer b.Close()
	var p backend.Plan
	p.Reset()
	err := b.Run(context.Background(), &p, backend.LayersFunc(func(context.Context, backend.Pass) error { return nil }))
	assert.ErrorContains(t, err, "no key/value cache")
	_, err = b.KV(backend.KVSpec{BlockSize: 8, Budget: 1 << 20})
	assert.ErrorContains(t, err, "blocks of 8 positions")
	_, err = b.KV(backend.KVSpec{Budget: 1, Layers: []int{0}})
	assert.ErrorContains(t, err, "smaller than one block")
	pool, err := b.KV(backend.KVSpec{Budget: 1 << 20, Layers: []int{1}})
	require.NoError(t, err)
	assert.Equal(t, int64(0), pool.Stats().ResidentBytes, "block memory comes with use")
	_, err = b.KV(backend.KVSpec{Budget: 1 << 20, Layers: []int{0}})
	assert.ErrorContains(t, err, "exists already")
	_, err = b.KV(backend.KVSpec{Budget: 1 << 20, Layers: []int{1}, Sliding: true})
	assert.ErrorContains(t, err, "layer 1 is in two key/value pools")
	_, err = b.KV(backend.KVSpec{Budget: 1 << 20, Layers: []int{2}, Sliding: true})
	assert.ErrorContains(t, err, "not ascending layers of 2")

	f32 := func(name string, rows, cols int) backend.Tensor {
		data, err := dtype.Encode(dtype.F32, make([]float32, rows*cols))
		require.NoError(t, err)
		return backend.Tensor{Name: name, Type: dtype.F32, Rows: rows, Cols: cols, Data: data}
	}
	_, err = b.Matrix()
	assert.ErrorContains(t, err, "a matrix of 0 parts")
	_, err = b.Matrix(f32("a", 4, 32), f32("b", 4, 16))
	assert.ErrorContains(t, err, `tensor "b" has 16 columns`)
	bad := f32("c", 4, 32)
	bad.Data = bad.Data[:10]
	_, err = b.Matrix(bad)
	assert.ErrorContains(t, err, `tensor "c"`)
	m, err := b.Matrix(f32("q", 8, 32), f32("k", 4, 32))
	require.NoError(t, err)
	assert.Equal(t, 12, m.Rows())
	assert.GreaterOrEqual(t, m.Bytes(), int64(12*32*4), "the repacked parts, padded to whole row groups")

	// A weight of another backend fails the pass, and the ops after do nothing.
	err = b.Run(context.Background(), &p, backend.LayersFunc(func(_ context.Context, ps backend.Pass) error {
		ps.Embed(backend.X, foreign{})
		ps.Norm(backend.XN, backend.X, foreignVector{})
		return nil
	}))
	assert.ErrorContains(t, err, "another backend")
	assert.ErrorContains(t, b.MulRows(foreign{}, nil, 0, nil), "another backend")
	assert.ErrorContains(t, b.EmbedRow(foreign{}, 0, nil), "another backend")
}

// TestSharedPool checks a pool that backends share: they start no threads, their
// Close leaves the pool running, products of several backends and goroutines on it
// at once are what each gives alone, and the pool's Close stops its threads. A
// backend of its own threads stops them at its Close.
func TestSharedPool(t *testing.T) {
	s := testShape()
	rows := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(i%7) - 3
		}
		return x
	}
	data, err := dtype.Encode(dtype.F32, rows(24*32))
	require.NoError(t, err)
	w := backend.Tensor{Name: "w", Type: dtype.F32, Rows: 24, Cols: 32, Data: data}
	product := func(b *Backend) []float32 {
		m, err := b.Matrix(w)
		require.NoError(t, err)
		y := make([]float32, 3*24)
		require.NoError(t, b.MulRows(m, rows(3*32), 3, y))
		return y
	}
	// settles waits up to a second for the number of goroutines to fall to n.
	settles := func(n int) bool {
		for range 1000 {
			if runtime.NumGoroutine() <= n {
				return true
			}
			time.Sleep(time.Millisecond)
		}
		return false
	}
	before := runtime.NumGoroutine()
	alone := New(s, 3)
	want := product(alone)
	require.NoError(t, alone.Close())
	assert.True(t, settles(before), "a backend's own threads stop at its Close")

	before = runtime.NumGoroutine()
	pool := NewPool(3)
	started := runtime.NumGoroutine()
	assert.Equal(t, before+2, started, "the caller and two helpers")
	var backends []*Backend
	for range 2 {
		be, err := pool.Factory()(s)
		require.NoError(t, err)
		backends = append(backends, be.(*Backend))
	}
	assert.Equal(t, started, runtime.NumGoroutine(), "backends on a pool start no threads")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			b := backends[i%2]
			assert.Same(t, pool, b.Pool())
			assert.Equal(t, want, product(b))
		})
	}
	wg.Wait()
	require.NoError(t, backends[0].Close())
	assert.Equal(t, want, product(backends[1]), "the pool outlives a backend closed")
	require.NoError(t, backends[1].Close())
	require.True(t, settles(started), "the goroutines of the products end")
	assert.Equal(t, started, runtime.NumGoroutine(), "closing its backends leaves the pool running")
	require.NoError(t, pool.Close())
	assert.True(t, settles(before), "the pool's Close stops its threads")
}

type foreign struct{}

func (foreign) Rows() int    { return 1 }
func (foreign) Bytes() int64 { return 0 }

type foreignVector struct{}

func (foreignVector) Len() int { return 0 }

var _ kvcache.Storage = (*store)(nil)
