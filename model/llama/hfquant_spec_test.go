package llama_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/backend/cuda"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/lookup"
	"github.com/specula/specula/internal/sharedtest"
	"github.com/specula/specula/model/llama"
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
			m, err := llama.Open(targetPath, llama.Options{Backend: cpu.Factory(2), KVBudget: 16 << 20})
			require.NoError(t, err)
			t.Cleanup(func() { _ = m.Close() })
			return m
		}},
		{"host", func(t *testing.T) *llama.Model { return openOn(t, cuda.HostDevice(), targetPath, llama.Options{}) }},
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
