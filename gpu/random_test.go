package gpu

import (
	"context"
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/internal/kernels"
	"github.com/specula/specula/model"
	"github.com/specula/specula/model/llama"
)

// tinyConfig is a small Qwen2-like shape (QKV biases, rotate-half rotary, grouped
// queries, tied embeddings) whose widths suit Q8_0.
func tinyConfig(style llama.RopeStyle) llama.Config {
	return llama.Config{
		Arch: "qwen2", Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, FFN: 96, Vocab: 100,
		ContextLength: 128, NormEps: 1e-6, RopeTheta: 1e6, RopeDim: 16, RopeStyle: style,
		QKVBias: true, TiedEmbeddings: true,
	}
}

// randomTypes are the weight types NewRandom makes.
var randomTypes = []dtype.DType{dtype.F32, dtype.F16, dtype.BF16, dtype.Q8_0}

// randomLogits forwards a prompt of 12 tokens and then a chain of 3, and returns the
// logits of every token of the chain.
func randomLogits(t *testing.T, m *Model) []float32 {
	t.Helper()
	s := newSeq(t, m)
	v := m.Info().VocabSize
	forward(t, s, v, model.Batch{Tokens: []int32{1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45}})
	return forward(t, s, v, model.Batch{Tokens: []int32{7, 8, 99}, Outputs: seqs(3)})
}

// TestNewRandom checks random-weight models on the host device for every weight type:
// the same seed gives the same logits and another seed others, the logits are finite
// and spread, untied output matrices work, DecodeBytes counts every matrix read per
// token, and shapes or types it cannot make are refused.
func TestNewRandom(t *testing.T) {
	ctx := context.Background()
	for _, typ := range randomTypes {
		t.Run(typ.String(), func(t *testing.T) {
			cfg := tinyConfig(llama.RopeHalf)
			m1, err := NewRandom(ctx, HostDevice(), cfg, typ, 7, testOpts)
			require.NoError(t, err)
			defer m1.Close()
			m2, err := NewRandom(ctx, HostDevice(), cfg, typ, 7, testOpts)
			require.NoError(t, err)
			defer m2.Close()
			m3, err := NewRandom(ctx, HostDevice(), cfg, typ, 8, testOpts)
			require.NoError(t, err)
			defer m3.Close()
			l1, l2, l3 := randomLogits(t, m1), randomLogits(t, m2), randomLogits(t, m3)
			assert.Equal(t, l1, l2, "same seed")
			assert.NotEqual(t, l1, l3, "other seed")
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, x := range l1 {
				require.False(t, math.IsNaN(float64(x)) || math.IsInf(float64(x), 0))
				lo, hi = math.Min(lo, float64(x)), math.Max(hi, float64(x))
			}
			assert.Greater(t, hi-lo, 0.1, "logits spread")

			rb := func(cols int) int64 {
				b, err := typ.Bytes(int64(cols))
				require.NoError(t, err)
				return b
			}
			c := cfg
			perLayer := int64(c.Heads*c.HeadDim+2*c.KVHeads*c.HeadDim)*rb(c.Dim) + int64(c.Dim)*rb(c.Heads*c.HeadDim) +
				int64(2*c.FFN)*rb(c.Dim) + int64(c.Dim)*rb(c.FFN)
			want := int64(c.Layers)*perLayer + int64(c.Vocab)*rb(c.Dim)
			assert.Equal(t, want, m1.DecodeBytes())
			assert.Greater(t, m1.WeightBytes(), want-int64(c.Vocab)*rb(c.Dim))

			// An untied output matrix (as Qwen2.5-7B's).
			c.TiedEmbeddings = false
			c.Arch = "llama"
			c.QKVBias = false
			c.RopeStyle = llama.RopeInterleaved
			m4, err := NewRandom(ctx, HostDevice(), c, typ, 7, testOpts)
			require.NoError(t, err)
			defer m4.Close()
			assert.Equal(t, want, m4.DecodeBytes(), "the output matrix replaces the embedding")
			assert.False(t, m4.Config().TiedEmbeddings)
			assert.NotEqual(t, l1, randomLogits(t, m4))
		})
	}
	_, err := NewRandom(ctx, HostDevice(), tinyConfig(llama.RopeHalf), dtype.Q4_0, 1, testOpts)
	assert.ErrorContains(t, err, "not supported")
	odd := tinyConfig(llama.RopeHalf)
	odd.FFN = 72
	_, err = NewRandom(ctx, HostDevice(), odd, dtype.Q8_0, 1, testOpts)
	assert.ErrorContains(t, err, "multiples of 32")
	bad := tinyConfig(llama.RopeHalf)
	bad.Heads = 3
	_, err = NewRandom(ctx, HostDevice(), bad, dtype.F16, 1, testOpts)
	assert.ErrorContains(t, err, "not a multiple")
	_, err = NewRandom(ctx, nil, tinyConfig(llama.RopeHalf), dtype.F16, 1, testOpts)
	assert.Error(t, err)
}

// TestHostFill checks the fill operation: F32 values uniform in offset ± scale, F16
// and BF16 their roundings, and Q8_0 exactly kernels.QuantizeQ8_0 of the F32 values.
func TestHostFill(t *testing.T) {
	h := &hostBackend{}
	const n = 4096
	const seed, scale, offset = 42, 0.25, 1.0
	alloc := func(bytes int64) devptr {
		p, err := h.alloc(bytes)
		require.NoError(t, err)
		return p
	}
	pf, ph, pb, pq := alloc(4*n), alloc(2*n), alloc(2*n), alloc(n/32*34)
	require.NoError(t, h.fill(pf, dtype.F32, n, seed, scale, offset))
	require.NoError(t, h.fill(ph, dtype.F16, n, seed, scale, offset))
	require.NoError(t, h.fill(pb, dtype.BF16, n, seed, scale, offset))
	require.NoError(t, h.fill(pq, dtype.Q8_0, n, seed, scale, offset))
	f := make([]float32, n)
	require.NoError(t, h.download(bytesOf(f), pf))
	half, bf, q := make([]byte, 2*n), make([]byte, 2*n), make([]byte, n/32*34)
	require.NoError(t, h.download(half, ph))
	require.NoError(t, h.download(bf, pb))
	require.NoError(t, h.download(q, pq))
	var mean float64
	for i, v := range f {
		require.True(t, v >= offset-scale && v < offset+scale, "value %d = %v", i, v)
		mean += float64(v) / n
		require.Equal(t, kernels.F32ToF16(v), binary.LittleEndian.Uint16(half[2*i:]))
		require.Equal(t, kernels.F32ToBF16(v), binary.LittleEndian.Uint16(bf[2*i:]))
	}
	assert.InDelta(t, offset, mean, 0.02)
	want := make([]byte, len(q))
	kernels.QuantizeQ8_0(f, want)
	assert.Equal(t, want, q)
	assert.Error(t, h.fill(pq, dtype.Q8_0, 33, seed, scale, offset))
	assert.Error(t, h.fill(pq, dtype.Q4_0, 32, seed, scale, offset))
}
