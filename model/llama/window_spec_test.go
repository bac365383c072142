package llama_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/lookup"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/gpu"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
)

// TestSlidingWindowSpecGreedyIdentical: speculative greedy decoding of 400 tokens on
// models with a sliding window of 8 — Mistral's kind (every layer slides) and Gemma
// 3's (sliding layers with their own books beside a global one) — equals plain greedy
// decoding token for token, drafted by the target's twin (every draft accepted), by
// a model of other weights in chains and trees (almost every draft rejected and
// rolled back) and by prompt lookup, while the blocks behind the window go back to
// the pool.
func TestSlidingWindowSpecGreedyIdentical(t *testing.T) {
	base := llama.Config{Arch: "llama", Dim: 64, Layers: 3, Heads: 4, KVHeads: 2, HeadDim: 16, FFN: 96, Vocab: 64,
		ContextLength: 2048, NormEps: 1e-5, RopeTheta: 10000, RopeDim: 16, RopeStyle: llama.RopeHalf,
		SlidingWindow: 8}
	gemma := base
	gemma.Arch, gemma.Sliding, gemma.LocalRopeTheta, gemma.PostNorms = "gemma3", []bool{true, true, false}, 1000, true
	for name, cfg := range map[string]llama.Config{"mistral": base, "gemma3": gemma} {
		t.Run(name, func(t *testing.T) {
			tm := newRandom(t, gpu.HostDevice(), cfg, dtype.F32, 3)
			twin := newRandom(t, gpu.HostDevice(), cfg, dtype.F32, 3)
			// A draft of other weights: its drafts mostly rejected, so rolled back.
			other := newRandom(t, gpu.HostDevice(), cfg, dtype.F32, 4)
			tgt, err := target.NewLocal(tm)
			require.NoError(t, err)
			plain, err := spec.New(tgt, nil, spec.Options{})
			require.NoError(t, err)
			req := spec.Request{Prompt: promptA[:20], MaxTokens: 400}
			for i := range req.Prompt {
				req.Prompt[i] %= int32(cfg.Vocab)
			}
			wants, err := plain.GenerateFunc(context.Background(), req, nil)
			require.NoError(t, err)
			want := wants[0]
			require.Len(t, want.Tokens, 400)
			chain, err := draft.NewSmallModel(twin)
			require.NoError(t, err)
			wrong, err := draft.NewSmallModel(other)
			require.NoError(t, err)
			tree, err := draft.NewSmallModelTree(other, draft.TreeShape{Width: 2, Depth: 3, MaxNodes: 6})
			require.NoError(t, err)
			for _, c := range []struct {
				name string
				d    draft.Drafter
				k    int
			}{{"twin-k4", chain, 4}, {"other-k4", wrong, 4}, {"other-tree-k6", tree, 6}, {"lookup-k5", lookup.NGram{}, 5}} {
				dec, err := spec.New(tgt, c.d, spec.Options{K: c.k})
				require.NoError(t, err)
				gots, err := dec.GenerateFunc(context.Background(), req, nil)
				require.NoError(t, err)
				got := gots[0]
				assert.Equal(t, want.Tokens, got.Tokens, c.name)
				t.Logf("%s: %s", c.name, got.Stats)
				if c.name == "other-k4" {
					assert.Less(t, got.Stats.Accepted, got.Stats.Drafted, "drafts rejected, rolled back")
					assert.Positive(t, got.Stats.Accepted, "drafts accepted")
				}
			}
			st := tm.KVStats()
			assert.Equal(t, st.Blocks, st.FreeBlocks, "every block is back in the pool")
		})
	}
}
