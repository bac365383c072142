package gpu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/batch"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/kvcache"
)

// These tests drive the device Backend (backend.go, pass.go) with plans built by hand,
// against the CPU backend on the same weights: what model/llama does, in a few lines,
// without importing it.

// hostTol bounds the difference between the host device's logits and the CPU
// backend's. Both multiply by the weights with the same kernels; attention adds up in
// another order, so the logits differ by float32 rounding only.
const hostTol = 1e-4

// weightTypes are the weight types the device multiplies by (Q4_Z converted to Q8_0
// at load).
var weightTypes = []dtype.DType{dtype.F32, dtype.F16, dtype.BF16, dtype.Q8_0, dtype.Q4_Z}

// testShape is a small shape with grouped queries and a partial rotary, whose widths
// suit Q8_0.
func testShape(style backend.RopeStyle) backend.Shape {
	return backend.Shape{Layers: 2, Dim: 64, Heads: 4, KVHeads: 2, HeadDim: 16, FFN: 96, Vocab: 50,
		RopeDim: 8, Style: style, NormEps: 1e-5}
}

// encode writes float32 values as a tensor of type typ.
func encode(t testing.TB, typ dtype.DType, v []float32) []byte {
	t.Helper()
	switch typ {
	case dtype.F32:
		return append([]byte(nil), bytesOf(v)...)
	case dtype.F16, dtype.BF16:
		out := make([]byte, 2*len(v))
		for i, x := range v {
			bits := dtype.F32ToF16(x)
			if typ == dtype.BF16 {
				bits = dtype.F32ToBF16(x)
			}
			binary.LittleEndian.PutUint16(out[2*i:], bits)
		}
		return out
	case dtype.Q8_0:
		out := make([]byte, len(v)/32*34)
		dtype.QuantizeQ8_0(v, out)
		return out
	case dtype.Q4_Z:
		return asymmetric4(t, v)
	}
	t.Fatalf("no encoder for %s", typ)
	return nil
}

// asymmetric4 writes v as Q4_Z blocks quantised as AWQ does a group: d = (max −
// min)/15, z = round(−min/d), q = round(x/d) + z, clamped to [0, 15].
func asymmetric4(t testing.TB, v []float32) []byte {
	out := make([]byte, len(v)/32*20)
	codes := make([]uint8, 32)
	for b := range len(v) / 32 {
		x := v[32*b : 32*b+32]
		lo, hi := slices.Min(x), slices.Max(x)
		d := dtype.F16ToF32(dtype.F32ToF16((hi - lo) / 15))
		var z float64
		if d > 0 {
			z = math.Max(0, math.Min(15, math.Round(float64(-lo/d))))
		}
		for j, xv := range x {
			q := z
			if d > 0 {
				q = math.Max(0, math.Min(15, math.Round(float64(xv/d))+z))
			}
			codes[j] = uint8(q)
		}
		require.NoError(t, dtype.EncodeQ4_Z(out[20*b:], dtype.F32ToF16(d), uint8(z), codes))
	}
	return out
}

// testWeights are a model's weights as a file would hold them.
type testWeights struct {
	shape   backend.Shape
	embed   backend.Tensor
	layers  [][]backend.Tensor // q, k, v, o, gate, up, down
	norms   [][]float32        // per layer: attention norm, FFN norm
	bias    [][]float32        // per layer: Q, K, V biases side by side
	outNorm []float32
}

// randomWeights makes weights of type typ, values uniform in ±√(3/cols).
func randomWeights(t testing.TB, s backend.Shape, typ dtype.DType, seed uint64) *testWeights {
	rng := rand.New(rand.NewPCG(seed, 1))
	vec := func(n int, scale, offset float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(offset + scale*(2*rng.Float64()-1))
		}
		return v
	}
	mat := func(name string, rows, cols int) backend.Tensor {
		return backend.Tensor{Name: name, Type: typ, Rows: rows, Cols: cols,
			Data: encode(t, typ, vec(rows*cols, math.Sqrt(3/float64(cols)), 0))}
	}
	w := &testWeights{shape: s, outNorm: vec(s.Dim, 0.1, 1)}
	w.embed = backend.Tensor{Name: "embed", Type: typ, Rows: s.Vocab, Cols: s.Dim,
		Data: encode(t, typ, vec(s.Vocab*s.Dim, 1, 0))}
	qd, kvd := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	for l := range s.Layers {
		name := func(p string) string { return fmt.Sprintf("blk.%d.%s", l, p) }
		w.layers = append(w.layers, []backend.Tensor{
			mat(name("q"), qd, s.Dim), mat(name("k"), kvd, s.Dim), mat(name("v"), kvd, s.Dim),
			mat(name("o"), s.Dim, qd), mat(name("gate"), s.FFN, s.Dim), mat(name("up"), s.FFN, s.Dim),
			mat(name("down"), s.Dim, s.FFN),
		})
		w.norms = append(w.norms, [][]float32{vec(s.Dim, 0.1, 1), vec(s.Dim, 0.1, 1)}...)
		w.bias = append(w.bias, vec(qd+2*kvd, 0.5, 0))
	}
	return w
}

// testLayer is one layer taken in by a backend.
type testLayer struct {
	attnNorm, ffnNorm, bias backend.Vector
	qkv, o, gateUp, down    backend.Matrix
}

// testModel is a model on a backend: the architecture of model/llama (tied
// embeddings, QKV biases), with the key/value books.
type testModel struct {
	be      backend.Backend
	embed   backend.Matrix
	layers  []testLayer
	outNorm backend.Vector
	kv      *kvcache.Pool
	invFreq []float64
	vocab   int
	dim     int
}

// load takes w in on be; the backend is closed at the end of the test.
func load(t testing.TB, be backend.Backend, w *testWeights) *testModel {
	t.Helper()
	t.Cleanup(func() { _ = be.Close() })
	s := w.shape
	m := &testModel{be: be, vocab: s.Vocab, dim: s.Dim}
	var err error
	m.embed, err = be.Matrix(w.embed)
	require.NoError(t, err)
	for l, ts := range w.layers {
		var ly testLayer
		ly.qkv, err = be.Matrix(ts[0], ts[1], ts[2])
		require.NoError(t, err)
		ly.o, err = be.Matrix(ts[3])
		require.NoError(t, err)
		ly.gateUp, err = be.Matrix(ts[4], ts[5])
		require.NoError(t, err)
		ly.down, err = be.Matrix(ts[6])
		require.NoError(t, err)
		ly.attnNorm, err = be.Vector(w.norms[2*l])
		require.NoError(t, err)
		ly.ffnNorm, err = be.Vector(w.norms[2*l+1])
		require.NoError(t, err)
		ly.bias, err = be.Vector(w.bias[l])
		require.NoError(t, err)
		m.layers = append(m.layers, ly)
	}
	m.outNorm, err = be.Vector(w.outNorm)
	require.NoError(t, err)
	m.kv, err = be.KV(backend.KVSpec{BlockSize: kvcache.DefaultBlockSize, Budget: 1 << 20})
	require.NoError(t, err)
	for i := range s.RopeDim / 2 {
		m.invFreq = append(m.invFreq, math.Pow(10000, -float64(2*i)/float64(s.RopeDim)))
	}
	return m
}

// pass runs every operation of a pass at least once, in an order of its own: a probe of
// the operations, not a model (model/llama's layer loop is checked on the host device
// in that package). The MLP ops run once on the embeddings, then each layer's
// attention ops, so that every layer's key/value stores and reads are exercised.
func (m *testModel) pass(_ context.Context, ps backend.Pass) error {
	ps.Embed(backend.X, m.embed)
	first := &m.layers[0]
	ps.Norm(backend.XN, backend.X, first.ffnNorm)
	ps.Mul(backend.GateUp, backend.XN, first.gateUp)
	ps.GLU(backend.SiLU)
	ps.MulAdd(backend.X, backend.Hidden, first.down)
	for l := range m.layers {
		ly := &m.layers[l]
		ps.Norm(backend.XN, backend.X, ly.attnNorm)
		ps.Mul(backend.QKV, backend.XN, ly.qkv)
		ps.Attention(l, backend.Attn{Bias: ly.bias})
		ps.MulAdd(backend.X, backend.Att, ly.o)
	}
	ps.Final(m.outNorm, m.embed)
	return nil
}

// forward appends batch i to seqs[i], all in one pass, and returns each batch's
// logits.
func (m *testModel) forward(t testing.TB, seqs []*kvcache.Seq, batches []batch.Batch) [][]float32 {
	t.Helper()
	var p backend.Plan
	p.Reset()
	p.Dim, p.InvFreq = m.dim, m.invFreq
	out := make([][]float32, len(seqs))
	for i, s := range seqs {
		b := batches[i]
		require.NoError(t, s.Grow(b.Tokens))
		out[i] = make([]float32, len(b.Outputs)*m.vocab)
		p.Add(s, nil, s.Len()-len(b.Tokens), b, 0, len(b.Tokens), out[i])
	}
	require.NoError(t, m.be.Run(context.Background(), &p, backend.LayersFunc(m.pass)))
	return out
}

// maxAbsDiff is the largest |a[i] − b[i]|.
func maxAbsDiff(a, b []float32) float64 {
	var worst float64
	for i := range a {
		worst = math.Max(worst, math.Abs(float64(a[i])-float64(b[i])))
	}
	return worst
}

// mustTree is the tree of a parent list that a test knows to be valid.
func mustTree(parents []int32) batch.Tree {
	t, err := batch.NewTree(parents)
	if err != nil {
		panic(err)
	}
	return t
}

// seqs returns 0, 1, …, n−1 as int32.
func seqs(n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(i)
	}
	return out
}

// backendScript runs the same steps on two models of the same weights and returns the
// largest logit difference: two sequences prefilled in one pass, then a tree and a
// chain in one pass, a fork that writes into a shared block (copy on write), Retain
// of a tree path (slot copies), a truncation, and decoding after them. The logits
// must be finite and spread, so that a backend that computes nothing fails.
func backendScript(t *testing.T, want, got *testModel) float64 {
	t.Helper()
	tok := func(n int, seed int32) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = (int32(i)*7 + seed) % int32(want.vocab)
		}
		return out
	}
	var worst float64
	steps := func(m *testModel) [][]float32 {
		a, b := m.kv.NewSeq(), m.kv.NewSeq()
		defer a.Close()
		defer b.Close()
		var all [][]float32
		all = append(all, m.forward(t, []*kvcache.Seq{a, b}, []batch.Batch{
			{Tokens: tok(20, 3), Outputs: []int32{0, 19}},
			{Tokens: tok(7, 5), Outputs: []int32{6}},
		})...)
		all = append(all, m.forward(t, []*kvcache.Seq{a, b}, []batch.Batch{
			{Tokens: tok(5, 11), Tree: mustTree([]int32{-1, 0, 0, 1, -1}), Outputs: seqs(5)},
			{Tokens: tok(3, 13), Outputs: seqs(3)},
		})...)
		c, err := b.Fork()
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, a.Retain(20, []int32{0, 1, 3}))
		require.NoError(t, b.Truncate(8))
		all = append(all, m.forward(t, []*kvcache.Seq{a, b, c}, []batch.Batch{
			{Tokens: tok(1, 17), Outputs: []int32{0}},
			{Tokens: tok(2, 19), Outputs: []int32{0, 1}},
			{Tokens: tok(12, 23), Outputs: []int32{11, 3}},
		})...)
		return all
	}
	w, g := steps(want), steps(got)
	require.Len(t, g, len(w))
	for i := range w {
		require.Len(t, g[i], len(w[i]))
		worst = math.Max(worst, maxAbsDiff(w[i], g[i]))
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, x := range g[i] {
			require.False(t, math.IsNaN(float64(x)) || math.IsInf(float64(x), 0), "logits of batch %d", i)
			lo, hi = math.Min(lo, float64(x)), math.Max(hi, float64(x))
		}
		assert.Greater(t, hi-lo, 0.1, "logits of batch %d spread", i)
	}
	st := got.kv.Stats()
	assert.Equal(t, st.Blocks, st.FreeBlocks, "every block is back in the pool")
	return worst
}

// TestHostBackendMatchesCPU checks the device Backend on the host device against the
// CPU backend, for every weight type and both rotary layouts, within [hostTol].
func TestHostBackendMatchesCPU(t *testing.T) {
	for _, typ := range weightTypes {
		for _, style := range []backend.RopeStyle{backend.RopeInterleaved, backend.RopeHalf} {
			t.Run(fmt.Sprintf("%s/style%d", typ, style), func(t *testing.T) {
				s := testShape(style)
				w := randomWeights(t, s, typ, 7)
				want := load(t, cpu.New(s, 1), w)
				hb, err := NewBackend(HostDevice(), s, BackendOptions{})
				require.NoError(t, err)
				got := load(t, hb, w)
				worst := backendScript(t, want, got)
				t.Logf("max |host − cpu| %.3g", worst)
				assert.LessOrEqual(t, worst, hostTol)
			})
		}
	}
}

// TestGPUBackendMatchesHost is [TestHostBackendMatchesCPU] on the GPU against the
// host device, within [gpuTol].
func TestGPUBackendMatchesHost(t *testing.T) {
	dev := openGPU(t)
	for _, typ := range weightTypes {
		for _, style := range []backend.RopeStyle{backend.RopeInterleaved, backend.RopeHalf} {
			t.Run(fmt.Sprintf("%s/style%d", typ, style), func(t *testing.T) {
				s := testShape(style)
				w := randomWeights(t, s, typ, 7)
				hb, err := NewBackend(HostDevice(), s, BackendOptions{})
				require.NoError(t, err)
				want := load(t, hb, w)
				gb, err := NewBackend(dev, s, BackendOptions{})
				require.NoError(t, err)
				got := load(t, gb, w)
				worst := backendScript(t, want, got)
				t.Logf("max |gpu − host| %.3g", worst)
				assert.LessOrEqual(t, worst, gpuTol)
			})
		}
	}
}

// TestHostBackendErrors checks what the device Backend refuses: shapes and tensors
// the kernels cannot take, passes before the key/value cache or beyond MaxBatch,
// weights of another backend, random weights it cannot make, and use after Close.
func TestHostBackendErrors(t *testing.T) {
	ctx := context.Background()
	s := testShape(backend.RopeHalf)
	_, err := NewBackend(nil, s, BackendOptions{})
	assert.ErrorContains(t, err, "nil device")
	odd := s
	odd.HeadDim = 15
	_, err = NewBackend(HostDevice(), odd, BackendOptions{})
	assert.ErrorContains(t, err, "head dimension 15")
	odd = s
	odd.Style = 7
	_, err = NewBackend(HostDevice(), odd, BackendOptions{})
	assert.ErrorContains(t, err, "rope style")

	g, err := NewBackend(HostDevice(), s, BackendOptions{MaxBatch: 4})
	require.NoError(t, err)
	assert.Equal(t, 4, g.MaxRows())
	assert.Equal(t, "host reference device", g.Name())
	w := randomWeights(t, s, dtype.F16, 1)
	_, err = g.Matrix()
	assert.Error(t, err, "no parts")
	q4 := w.embed
	q4.Type = dtype.Q4_0
	_, err = g.Matrix(q4)
	assert.ErrorContains(t, err, "supports F32, F16, BF16 and Q8_0")
	_, err = g.Matrix(w.layers[0][0], w.layers[0][6])
	assert.ErrorContains(t, err, "columns", "parts of different widths")
	short := w.embed
	short.Data = short.Data[:len(short.Data)-2]
	_, err = g.Matrix(short)
	assert.ErrorContains(t, err, "bytes for")
	mixed := w.layers[0][1]
	mixed.Type, mixed.Data = dtype.F32, encode(t, dtype.F32, make([]float32, mixed.Rows*mixed.Cols))
	m, err := g.Matrix(w.layers[0][0], mixed, w.layers[0][2])
	require.NoError(t, err, "parts of different types")
	assert.Equal(t, s.QKVWidth(), m.Rows())

	var p backend.Plan
	p.Reset()
	p.Tokens = []int32{1}
	assert.ErrorContains(t, g.Run(ctx, &p, backend.LayersFunc(func(context.Context, backend.Pass) error { return nil })), "no key/value cache")
	pool, err := g.KV(backend.KVSpec{Budget: 1 << 20})
	require.NoError(t, err)
	assert.Equal(t, kvcache.DefaultBlockSize, pool.Stats().BlockSize)
	_, err = g.KV(backend.KVSpec{Budget: 1 << 20})
	assert.ErrorContains(t, err, "exists already")

	seq := pool.NewSeq()
	defer seq.Close()
	toks := []int32{1, 2, 3, 4, 5}
	require.NoError(t, seq.Grow(toks))
	p.Reset()
	p.Dim, p.InvFreq = s.Dim, []float64{1, 0.1}
	p.Add(seq, nil, 0, batch.Batch{Tokens: toks}, 0, 5, nil)
	assert.ErrorContains(t, g.Run(ctx, &p, backend.LayersFunc(func(context.Context, backend.Pass) error { return nil })), "at most 4")
	p.Reset()
	p.Add(seq, nil, 0, batch.Batch{Tokens: toks}, 0, 4, nil)
	other := cpu.New(s, 1)
	defer other.Close()
	foreign, err := other.Matrix(w.embed)
	require.NoError(t, err)
	assert.ErrorContains(t, g.Run(ctx, &p, backend.LayersFunc(func(_ context.Context, ps backend.Pass) error {
		ps.Embed(backend.X, foreign)
		return nil
	})), "another backend")
	want := errors.New("the pass's own error")
	assert.ErrorIs(t, g.Run(ctx, &p, backend.LayersFunc(func(context.Context, backend.Pass) error { return want })), want)

	_, err = g.RandomMatrix(dtype.Q4_0, 2, 32, 1, 1)
	assert.ErrorContains(t, err, "not supported")
	_, err = g.RandomMatrix(dtype.Q8_0, 2, 72, 1, 1)
	assert.ErrorContains(t, err, "whole blocks")
	rm, err := g.RandomMatrix(dtype.Q8_0, 2, 64, 1, 1)
	require.NoError(t, err)
	assert.Equal(t, int64(2*2*34), rm.Bytes())

	require.NoError(t, g.Close())
	require.NoError(t, g.Close(), "closing twice is harmless")
	_, err = g.Matrix(w.embed)
	assert.ErrorContains(t, err, "backend is closed")
	_, err = g.Vector(w.outNorm)
	assert.ErrorContains(t, err, "backend is closed")
	assert.ErrorContains(t, g.Run(ctx, &p, backend.LayersFunc(func(context.Context, backend.Pass) error { return nil })), "backend is closed")
}
