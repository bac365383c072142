package llama_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/lookup"
	"github.com/specula/specula/gpu"
	"github.com/specula/specula/model"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
)

// drafterCase is a drafter to speculate with, and its K.
type drafterCase struct {
	name    string
	drafter draft.Drafter
	k       int
}

// checkGreedyIdentical decodes promptA and promptB 32 tokens greedily with the target
// alone, then with each drafter, and requires the same tokens. With full set, plain
// decoding must produce all 32 tokens.
func checkGreedyIdentical(t *testing.T, m model.Model, cases []drafterCase, full bool) {
	t.Helper()
	ctx := context.Background()
	tgt, err := target.NewLocal(m)
	require.NoError(t, err)
	plain, err := spec.New(tgt, nil, spec.Options{})
	require.NoError(t, err)
	for _, prompt := range [][]int32{promptA, promptB} {
		req := spec.Request{Prompt: prompt, MaxTokens: 32}
		wants, err := plain.GenerateFunc(ctx, req, nil)
		require.NoError(t, err)
		want := wants[0]
		if full {
			require.Len(t, want.Tokens, 32)
		}
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/prompt%d", c.name, len(prompt)), func(t *testing.T) {
				dec, err := spec.New(tgt, c.drafter, spec.Options{K: c.k})
				require.NoError(t, err)
				gots, err := dec.GenerateFunc(ctx, req, nil)
				require.NoError(t, err)
				got := gots[0]
				assert.Equal(t, want.Tokens, got.Tokens)
				assert.Greater(t, got.Stats.Accepted, 0, "some drafts accepted: speculation happened")
				t.Logf("%d target passes for %d tokens", got.Stats.Steps, len(got.Tokens))
			})
		}
	}
}

// TestHostSpecGreedyIdentical runs spec.Decoder with a model on the host device as
// target and CPU drafters — gocoder-xs on the CPU backend (chains and trees) and
// n-gram lookup — and checks that the greedy output equals plain greedy decoding of
// the same target, token for token.
func TestHostSpecGreedyIdentical(t *testing.T) {
	targetPath := xsPath(t)
	tm := openOn(t, gpu.HostDevice(), targetPath, nil, llama.Options{})
	cpuDraft := openCPU(t, xsDraftPath(targetPath))
	chain, err := draft.NewSmallModel(cpuDraft)
	require.NoError(t, err)
	tree, err := draft.NewSmallModelTree(cpuDraft, draft.TreeShape{Width: 2, Depth: 3, MaxNodes: 6})
	require.NoError(t, err)
	checkGreedyIdentical(t, tm, []drafterCase{
		{"model-chain-k4", chain, 4},
		{"model-tree-k6", tree, 6},
		{"ngram-k5", lookup.NGram{}, 5},
	}, true)
	st := tm.KVStats()
	assert.Equal(t, st.Blocks, st.FreeBlocks, "every block is back in the pool")
}

// TestGPUSpecGreedyIdentical is [TestHostSpecGreedyIdentical] with a GPU target, and
// with CPU and GPU drafters.
func TestGPUSpecGreedyIdentical(t *testing.T) {
	dev := openGPU(t)
	targetPath := xsPath(t)
	draftPath := xsDraftPath(targetPath)
	tm := openOn(t, dev, targetPath, nil, llama.Options{})
	cpuDraft, err := draft.NewSmallModel(openCPU(t, draftPath))
	require.NoError(t, err)
	gpuDraftModel := openOn(t, dev, draftPath, nil, llama.Options{})
	gpuDraft, err := draft.NewSmallModel(gpuDraftModel)
	require.NoError(t, err)
	gpuTree, err := draft.NewSmallModelTree(gpuDraftModel, draft.TreeShape{Width: 2, Depth: 3, MaxNodes: 6})
	require.NoError(t, err)
	checkGreedyIdentical(t, tm, []drafterCase{
		{"cpu-draft-k4", cpuDraft, 4},
		{"gpu-draft-k4", gpuDraft, 4},
		{"gpu-tree-k6", gpuTree, 6},
		{"ngram-k5", lookup.NGram{}, 5},
	}, false)
	st := tm.KVStats()
	assert.Equal(t, st.Blocks, st.FreeBlocks, "every block is back in the pool")
}
