package gpu

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/model"
)

// hostTol bounds the difference between the host device's logits and the CPU
// runtime's. Both multiply by the weights with the same kernels; attention and RMSNorm
// add up in other orders, so the logits differ by float32 rounding only (measured:
// below 1e-5 on gocoder-xs).
const hostTol = 1e-4

// step is one operation applied alike to a sequence of each runtime.
type step struct {
	name     string
	batch    model.Batch // forwarded when truncate and retain are unset
	truncate int         // > 0: Truncate(Len() − truncate)
	retain   []int32     // non-nil: Retain(retain)
}

// script exercises the sequence contract: a prompt prefill with several outputs,
// single-token decoding, chain batches of 5 with consecutive and scattered outputs, a
// rollback, a tree batch with a parent list and Retain of one path, and decoding
// after it.
func script(prompt []int32) []step {
	return []step{
		{name: "prefill", batch: model.Batch{Tokens: prompt, Outputs: []int32{0, int32(len(prompt) / 2), int32(len(prompt) - 1)}}},
		{name: "decode1", batch: model.Batch{Tokens: []int32{10}, Outputs: []int32{0}}},
		{name: "decode2", batch: model.Batch{Tokens: []int32{9}, Outputs: []int32{0}}},
		{name: "decode3", batch: model.Batch{Tokens: []int32{295}, Outputs: []int32{0}}},
		{name: "chain5-all", batch: model.Batch{Tokens: []int32{116, 46, 3421, 374, 354}, Outputs: seqs(5)}},
		{name: "chain5-scattered", batch: model.Batch{Tokens: []int32{266, 256, 9, 311, 46}, Outputs: []int32{4, 1, 2}}},
		{name: "rollback", truncate: 3},
		{name: "chain5-again", batch: model.Batch{Tokens: []int32{9, 125, 10, 10, 9}, Outputs: []int32{0, 4}}},
		{name: "tree", batch: model.Batch{
			Tokens:  []int32{295, 259, 46, 1067, 2114, 40, 311},
			Tree:    mustTree([]int32{-1, 0, 0, 1, 1, 2, -1}),
			Outputs: seqs(7)}},
		{name: "retain", retain: []int32{0, 2, 5}},
		{name: "after-retain", batch: model.Batch{Tokens: []int32{44}, Outputs: []int32{0}}},
		{name: "tree-again", batch: model.Batch{
			Tokens:  []int32{2843, 41, 671, 281},
			Tree:    mustTree([]int32{-1, 0, -1, 2}),
			Outputs: []int32{3, 1}}},
		{name: "retain-none", retain: []int32{}},
		{name: "decode-end", batch: model.Batch{Tokens: []int32{41, 671}, Outputs: []int32{1}}},
	}
}

// runScript applies the steps to sequences of two models and returns the largest
// logit difference; every step's lengths must agree, and so must the argmax of every
// output whose two best logits in want are more than 2·tol apart.
func runScript(t *testing.T, want, got model.Model, steps []step, tol float64) float64 {
	t.Helper()
	ws, gs := newSeq(t, want), newSeq(t, got)
	v := want.Info().VocabSize
	require.Equal(t, v, got.Info().VocabSize)
	var worst float64
	from := 0 // the length before the last forward
	for _, st := range steps {
		switch {
		case st.truncate > 0:
			n := ws.Len() - st.truncate
			require.NoError(t, ws.Truncate(n), st.name)
			require.NoError(t, gs.Truncate(n), st.name)
		case st.retain != nil:
			require.NoError(t, ws.Retain(from, st.retain), st.name)
			require.NoError(t, gs.Retain(from, st.retain), st.name)
		default:
			from = ws.Len()
			wl := forward(t, ws, v, st.batch)
			gl := forward(t, gs, v, st.batch)
			d := maxAbsDiff(wl, gl)
			worst = math.Max(worst, d)
			for r := range st.batch.Outputs {
				if w := wl[r*v : (r+1)*v]; gap(w) > 2*tol {
					assert.Equal(t, argmax(w), argmax(gl[r*v:(r+1)*v]), "%s: output %d argmax", st.name, r)
				}
			}
		}
		require.Equal(t, ws.Len(), gs.Len(), st.name)
	}
	return worst
}

// TestHostMatchesCPU checks the runner on the host device against model/llama on the
// same files: logits of every step of [script] (prefill, decoding, chain batches of 5,
// rollback, tree batches and Retain) within [hostTol], and 32 tokens of greedy
// continuation identical.
func TestHostMatchesCPU(t *testing.T) {
	for _, f := range modelFiles() {
		t.Run(f.name, func(t *testing.T) {
			path := f.path(t)
			cpu := openCPU(t, path)
			host := openOn(t, HostDevice(), path)
			require.Equal(t, cpu.Config(), host.Config())
			prompt := promptA
			if v := cpu.Info().VocabSize; v < 8192 {
				t.Fatalf("vocabulary of %d: the prompts need 8192", v)
			}
			worst := runScript(t, cpu, host, script(prompt), hostTol)
			t.Logf("%s: max |host − cpu| logit difference %.3g", f.name, worst)
			assert.LessOrEqual(t, worst, hostTol)
			assert.Equal(t, greedy(t, cpu, promptB, 32), greedy(t, host, promptB, 32), "greedy continuation")
		})
	}
}

// TestHostChunkedPasses forwards a prompt longer than MaxBatch, which the runner cuts
// into passes, and checks the logits of outputs spread over the passes against the
// CPU runtime.
func TestHostChunkedPasses(t *testing.T) {
	path := repoModel(t, "gocoder-xs-q8_0.gguf")
	cpu := openCPU(t, path)
	opts := testOpts
	opts.MaxBatch = 7
	opts.BlockSize = 4
	host, err := Open(context.Background(), HostDevice(), path, opts)
	require.NoError(t, err)
	defer host.Close()
	worst := runScript(t, cpu, host, script(promptA), hostTol)
	t.Logf("max |host − cpu| with passes of 7 and blocks of 4: %.3g", worst)
	assert.LessOrEqual(t, worst, hostTol)
}

// TestSpecGreedyIdentical runs spec.Decoder unchanged with the host-device model as
// target and CPU drafters — gocoder-xs on model/llama (chains and trees) and n-gram
// lookup — and checks that the greedy output equals plain greedy decoding of the same
// target, token for token.
func TestSpecGreedyIdentical(t *testing.T) {
	targetPath := repoModel(t, "gocoder-xs-q8_0.gguf")
	target := openOn(t, HostDevice(), targetPath)
	cpuDraft := openCPU(t, xsDraftPath(targetPath))
	chain, err := draft.NewModel(cpuDraft)
	require.NoError(t, err)
	tree, err := draft.NewModelTree(cpuDraft, draft.Tree{Width: 2, Depth: 3, MaxNodes: 6})
	require.NoError(t, err)
	checkGreedyIdentical(t, target, []drafterCase{
		{"model-chain-k4", chain, 4},
		{"model-tree-k6", tree, 6},
		{"ngram-k5", draft.NGram{}, 5},
	}, true)
	st := target.KVStats()
	assert.Equal(t, st.Blocks, st.FreeBlocks, "every block is back in the pool")
}
