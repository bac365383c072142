package llama_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/batch"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/gpu"
	"github.com/specula/specula/model/llama"
)

// randomConfig is a small Qwen2-like shape (QKV biases, rotate-half rotary, grouped
// queries, tied embeddings) whose widths suit Q8_0.
func randomConfig(style llama.RopeStyle) llama.Config {
	return llama.Config{
		Arch: "qwen2", Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, FFN: 96, Vocab: 100,
		ContextLength: 128, NormEps: 1e-6, RopeTheta: 1e6, RopeDim: 16, RopeStyle: style,
		QKVBias: true, TiedEmbeddings: true,
	}
}

// randomTypes are the weight types NewRandom makes.
var randomTypes = []dtype.DType{dtype.F32, dtype.F16, dtype.BF16, dtype.Q8_0}

// newRandom makes a random-weight model on dev, closed at the end of the test.
func newRandom(t testing.TB, dev *gpu.Device, cfg llama.Config, typ dtype.DType, seed uint64) *llama.Model {
	t.Helper()
	m, err := llama.NewRandom(cfg, typ, seed, gpu.Factory(dev, gpu.BackendOptions{}), llama.Options{KVBudget: deviceKV})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	return m
}

// randomLogits forwards a prompt of 12 tokens and then a chain of 3, and returns the
// logits of every token of the chain.
func randomLogits(t *testing.T, m *llama.Model) []float32 {
	t.Helper()
	s := newSeq(t, m)
	v := m.Info().VocabSize
	forward(t, s, v, batch.Batch{Tokens: []int32{1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45}})
	return forward(t, s, v, batch.Batch{Tokens: []int32{7, 8, 99}, Outputs: seqs(3)})
}

// TestHostNewRandom checks random-weight models on the host device for every weight
// type: the same seed gives the same logits and another seed others, the logits are
// finite and spread, untied output matrices work, WeightBytes counts the matrices,
// and shapes, types or backends it cannot make them on are refused (the
// CPU among them).
func TestHostNewRandom(t *testing.T) {
	for _, typ := range randomTypes {
		t.Run(typ.String(), func(t *testing.T) {
			cfg := randomConfig(llama.RopeHalf)
			m1 := newRandom(t, gpu.HostDevice(), cfg, typ, 7)
			m2 := newRandom(t, gpu.HostDevice(), cfg, typ, 7)
			m3 := newRandom(t, gpu.HostDevice(), cfg, typ, 8)
			assert.Equal(t, fmt.Sprintf("random-qwen2-2x64-%s", typ), m1.Info().Name)
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
			table := int64(c.Vocab) * rb(c.Dim)
			assert.Equal(t, int64(c.Layers)*perLayer+table, m1.WeightBytes(), "tied: one table")

			// An untied output matrix (as Qwen2.5-7B's).
			c.TiedEmbeddings = false
			c.Arch = "llama"
			c.QKVBias = false
			c.RopeStyle = llama.RopeInterleaved
			m4 := newRandom(t, gpu.HostDevice(), c, typ, 7)
			assert.Equal(t, int64(c.Layers)*perLayer+2*table, m4.WeightBytes(), "untied: two tables")
			assert.False(t, m4.Config().TiedEmbeddings)
			assert.NotEqual(t, l1, randomLogits(t, m4))
		})
	}
	host, opts := gpu.Factory(gpu.HostDevice(), gpu.BackendOptions{}), llama.Options{KVBudget: deviceKV}
	_, err := llama.NewRandom(randomConfig(llama.RopeHalf), dtype.Q4_0, 1, host, opts)
	assert.ErrorContains(t, err, "not supported")
	odd := randomConfig(llama.RopeHalf)
	odd.FFN = 72
	_, err = llama.NewRandom(odd, dtype.Q8_0, 1, host, opts)
	assert.ErrorContains(t, err, "whole blocks")
	bad := randomConfig(llama.RopeHalf)
	bad.Heads = 3
	_, err = llama.NewRandom(bad, dtype.F16, 1, host, opts)
	assert.ErrorContains(t, err, "not a multiple")
	_, err = llama.NewRandom(randomConfig(llama.RopeHalf), dtype.F16, 1, cpu.Factory(1), llama.Options{KVBudget: deviceKV})
	assert.ErrorContains(t, err, "cannot make them", "the CPU backend makes no random weights")
	_, err = llama.NewRandom(randomConfig(llama.RopeHalf), dtype.F16, 1, nil, llama.Options{KVBudget: deviceKV})
	assert.ErrorContains(t, err, "no backend")
	_, err = llama.NewRandom(randomConfig(llama.RopeHalf), dtype.F16, 1, gpu.Factory(gpu.HostDevice(), gpu.BackendOptions{}), llama.Options{KVBudget: 1000})
	assert.ErrorContains(t, err, "smaller than one block")
}

// TestGPUMatchesHostRandom compares the GPU with the host device on random-weight
// models of every weight type and both rotary layouts — the same weights on both, as
// the fill kernels reproduce the host's values — with a prompt of 80 tokens (cuBLAS for
// F32, F16, BF16) and every step of [script].
func TestGPUMatchesHostRandom(t *testing.T) { checkMatchesHostRandom(t, openGPU(t), gpuTol) }

// TestHostRandomScript is [TestGPUMatchesHostRandom] between two host devices: a
// model on the device is deterministic, and the script suits the random models.
func TestHostRandomScript(t *testing.T) { checkMatchesHostRandom(t, gpu.HostDevice(), 0) }

func checkMatchesHostRandom(t *testing.T, dev *gpu.Device, tol float64) {
	prompt := make([]int32, 80)
	for i := range prompt {
		prompt[i] = int32(i*37+11) % 100
	}
	for _, typ := range randomTypes {
		for _, style := range []llama.RopeStyle{llama.RopeInterleaved, llama.RopeHalf} {
			t.Run(fmt.Sprintf("%s/style%d", typ, style), func(t *testing.T) {
				cfg := randomConfig(style)
				cfg.Vocab = 1000
				host := newRandom(t, gpu.HostDevice(), cfg, typ, 3)
				g := newRandom(t, dev, cfg, typ, 3)
				worst := runScript(t, host, g, modScript(prompt, cfg.Vocab), tol)
				t.Logf("max |%s − host| %.3g", dev.Info().Kind, worst)
				assert.LessOrEqual(t, worst, tol)
			})
		}
	}
}
