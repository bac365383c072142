package llama_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/batch"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/lookup"
	"github.com/specula/specula/gpu"
	"github.com/specula/specula/internal/sharedtest"
	"github.com/specula/specula/internal/spectest"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
)

// TestQuantizedSpecGreedyIdentical speculates for the act-order GPTQ gocoder-m (its
// layers repacked into Q8_0 with their inputs sorted by group, every product's
// activations gathered into that order) with gocoder-s drafting (chains and trees)
// and n-gram lookup, on the CPU backend and on the host device, and checks that the
// greedy output equals plain greedy decoding of the same target, token for token:
// the verification passes (many rows) and the plain ones (one row) gather alike.
func TestQuantizedSpecGreedyIdentical(t *testing.T) {
	targetPath := sharedtest.Path(t, "models", "gocoder-m-gptq")
	draftModel := openCPU(t, sharedtest.Path(t, "models", "gocoder-s"))
	chain, err := draft.NewSmallModel(draftModel)
	require.NoError(t, err)
	tree, err := draft.NewSmallModelTree(draftModel, draft.TreeShape{Width: 2, Depth: 3, MaxNodes: 6})
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		open func(t *testing.T) *llama.Model
	}{
		{"cpu", func(t *testing.T) *llama.Model {
			m, err := llama.Open(targetPath, cpu.Factory(2), llama.Options{KVBudget: 16 << 20})
			require.NoError(t, err)
			t.Cleanup(func() { _ = m.Close() })
			return m
		}},
		{"host", func(t *testing.T) *llama.Model { return openOn(t, gpu.HostDevice(), targetPath, nil, llama.Options{}) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			tm := c.open(t)
			checkGreedyIdentical(t, tm, []drafterCase{
				{"s-chain-k4", chain, 4},
				{"s-tree-k6", tree, 6},
				{"ngram-k5", lookup.NGram{}, 5},
			}, true)
			st := tm.KVStats()
			assert.Equal(t, st.Blocks, st.FreeBlocks, "every block is back in the pool")
		})
	}
}

// TestQuantizedKindsGreedyIdentical speculates for the other repacked kinds of
// quantized target — AWQ (Q4_Z128), W4A16 (Q4_0), FP8 (F8_E4M3_B128) — with a
// gocoder-s chain and n-gram lookup on the CPU: greedy output equal to plain greedy
// decoding of the same target, token for token.
func TestQuantizedKindsGreedyIdentical(t *testing.T) {
	chain, err := draft.NewSmallModel(openCPU(t, sharedtest.Path(t, "models", "gocoder-s")))
	require.NoError(t, err)
	for _, name := range []string{"gocoder-m-awq", "gocoder-m-w4a16", "gocoder-s-fp8"} {
		t.Run(name, func(t *testing.T) {
			checkGreedyIdentical(t, openCPU(t, sharedtest.Path(t, "models", name)), []drafterCase{
				{"s-chain-k4", chain, 4},
				{"ngram-k5", lookup.NGram{}, 5},
			}, true)
		})
	}
}

// TestQuantizedSampledDistribution samples two-token continuations from speculative
// decoding of each repacked kind of quantized target — AWQ (Q4_Z128), act-order GPTQ
// (Q4_Z128 with its inputs gathered), W4A16 (Q4_0), FP8 (F8_E4M3_B128) — drafted by
// gocoder-s, and checks them by chi-square against the target's own distribution
// (temperature 1, top-k 40, computed from the target's logits), drafts accepted and
// rejected both.
func TestQuantizedSampledDistribution(t *testing.T) {
	d, err := draft.NewSmallModel(openCPU(t, sharedtest.Path(t, "models", "gocoder-s")))
	require.NoError(t, err)
	for _, name := range []string{"gocoder-m-awq", "gocoder-m-gptq", "gocoder-m-w4a16", "gocoder-s-fp8"} {
		t.Run(name, func(t *testing.T) {
			tm := openCPU(t, sharedtest.Path(t, "models", name))
			tgt, err := target.NewLocal(tm)
			require.NoError(t, err)
			dec, err := spec.New(tgt, d, spec.Options{K: 3})
			require.NoError(t, err)
			vocab := tm.Info().VocabSize
			logits := func(h []int32) []float32 {
				seq, err := tm.NewSequence(context.Background())
				require.NoError(t, err)
				defer seq.Close()
				return forward(t, seq, vocab, batch.Batch{Tokens: h, Outputs: []int32{int32(len(h) - 1)}})
			}
			spectest.TwoTokens(t, dec, logits, vocab, []int32{2389, 9, 880}, sampler.Params{Temperature: 1.0, TopK: 40}, 1500)
		})
	}
}
