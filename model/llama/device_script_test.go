package llama_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/gpu"
	"github.com/specula/specula/model"
	"github.com/specula/specula/model/llama"
)

// step is one operation applied alike to a sequence of each model.
type step struct {
	name     string
	batch    batch.Batch // forwarded when truncate and retain are unset
	truncate int         // > 0: Truncate(Len() − truncate)
	retain   []int32     // non-nil: Retain(from, retain), from the length before the last forward
}

// script exercises the sequence contract: a prompt prefill with several outputs,
// single-token decoding, chain batches of 5 with consecutive and scattered outputs, a
// rollback, a tree batch with a parent list and Retain of one path, and decoding
// after it.
func script(prompt []int32) []step {
	return []step{
		{name: "prefill", batch: batch.Batch{Tokens: prompt, Outputs: []int32{0, int32(len(prompt) / 2), int32(len(prompt) - 1)}}},
		{name: "decode1", batch: batch.Batch{Tokens: []int32{10}, Outputs: []int32{0}}},
		{name: "decode2", batch: batch.Batch{Tokens: []int32{9}, Outputs: []int32{0}}},
		{name: "decode3", batch: batch.Batch{Tokens: []int32{295}, Outputs: []int32{0}}},
		{name: "chain5-all", batch: batch.Batch{Tokens: []int32{116, 46, 3421, 374, 354}, Outputs: seqs(5)}},
		{name: "chain5-scattered", batch: batch.Batch{Tokens: []int32{266, 256, 9, 311, 46}, Outputs: []int32{4, 1, 2}}},
		{name: "rollback", truncate: 3},
		{name: "chain5-again", batch: batch.Batch{Tokens: []int32{9, 125, 10, 10, 9}, Outputs: []int32{0, 4}}},
		{name: "tree", batch: batch.Batch{
			Tokens:  []int32{295, 259, 46, 1067, 2114, 40, 311},
			Tree:    mustTree([]int32{-1, 0, 0, 1, 1, 2, -1}),
			Outputs: seqs(7)}},
		{name: "retain", retain: []int32{0, 2, 5}},
		{name: "after-retain", batch: batch.Batch{Tokens: []int32{44}, Outputs: []int32{0}}},
		{name: "tree-again", batch: batch.Batch{
			Tokens:  []int32{2843, 41, 671, 281},
			Tree:    mustTree([]int32{-1, 0, -1, 2}),
			Outputs: []int32{3, 1}}},
		{name: "retain-none", retain: []int32{}},
		{name: "decode-end", batch: batch.Batch{Tokens: []int32{41, 671}, Outputs: []int32{1}}},
	}
}

// modScript is [script] with every token reduced modulo vocab, for small random models.
func modScript(prompt []int32, vocab int) []step {
	steps := script(prompt)
	for i := range steps {
		toks := append([]int32(nil), steps[i].batch.Tokens...)
		for j := range toks {
			toks[j] %= int32(vocab)
		}
		steps[i].batch.Tokens = toks
	}
	return steps
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

// TestHostMatchesCPU checks models on the host device against the CPU backend on the
// same files: logits of every step of [script] (prefill, decoding, chain batches of 5,
// rollback, tree batches and Retain) within [hostTol], and 32 tokens of greedy
// continuation identical.
func TestHostMatchesCPU(t *testing.T) {
	for _, f := range modelFiles() {
		t.Run(f.name, func(t *testing.T) {
			path := f.path(t)
			cpu := openCPU(t, path)
			host := openOn(t, gpu.HostDevice(), path, nil, llama.Options{})
			require.Equal(t, cpu.Config(), host.Config())
			assert.True(t, strings.HasPrefix(cpu.BackendName(), "cpu"), cpu.BackendName())
			assert.Equal(t, "host reference device", host.BackendName(), "the model runs on the device")
			if v := cpu.Info().VocabSize; v < 8192 {
				t.Fatalf("vocabulary of %d: the prompts need 8192", v)
			}
			worst := runScript(t, cpu, host, script(promptA), hostTol)
			t.Logf("%s: max |host − cpu| logit difference %.3g", f.name, worst)
			assert.LessOrEqual(t, worst, hostTol)
			assert.Equal(t, greedy(t, cpu, promptB, 32), greedy(t, host, promptB, 32), "greedy continuation")
		})
	}
}

// TestGPUMatchesCPU is [TestHostMatchesCPU] on the GPU: every step of [script] within
// [gpuTol] of the CPU backend on the gocoder-xs files, and 32 tokens of greedy
// continuation identical.
func TestGPUMatchesCPU(t *testing.T) {
	dev := openGPU(t)
	for _, f := range modelFiles() {
		t.Run(f.name, func(t *testing.T) {
			path := f.path(t)
			cpu := openCPU(t, path)
			g := openOn(t, dev, path, nil, llama.Options{})
			assert.True(t, strings.HasPrefix(g.BackendName(), "cuda"), g.BackendName())
			worst := runScript(t, cpu, g, script(promptA), gpuTol)
			t.Logf("%s: max |gpu − cpu| logit difference %.3g", f.name, worst)
			assert.LessOrEqual(t, worst, gpuTol)
			want, got := greedy(t, cpu, promptB, 32), greedy(t, g, promptB, 32)
			assert.Equal(t, want, got, "greedy continuation")
		})
	}
}

// TestHostChunkedPasses forwards a prompt longer than MaxBatch, which the model cuts
// into passes, and checks the logits of outputs spread over the passes against the
// CPU backend, which takes any batch in one pass.
func TestHostChunkedPasses(t *testing.T) {
	path := xsPath(t)
	cpu := openCPU(t, path)
	host := openOn(t, nil, path, gpu.Factory(gpu.HostDevice(), gpu.BackendOptions{MaxBatch: 7}), llama.Options{})
	worst := runScript(t, cpu, host, script(promptA), hostTol)
	t.Logf("max |host − cpu| with passes of 7: %.3g", worst)
	assert.LessOrEqual(t, worst, hostTol)
}

// TestGPUBatchInvariance checks what greedy speculative decoding relies on: a token's
// logits on the GPU are bit-identical whether it is forwarded alone, in a chain of 5,
// as a node of a tree, or with other sequences in one Model.Forward.
func TestGPUBatchInvariance(t *testing.T) { checkBatchInvariance(t, openGPU(t)) }

// TestHostBatchInvariance is [TestGPUBatchInvariance] on the host device.
func TestHostBatchInvariance(t *testing.T) { checkBatchInvariance(t, gpu.HostDevice()) }

func checkBatchInvariance(t *testing.T, dev *gpu.Device) {
	for _, f := range modelFiles()[:2] {
		t.Run(f.name, func(t *testing.T) {
			m := openOn(t, dev, f.path(t), nil, llama.Options{})
			v := m.Info().VocabSize
			chain := []int32{116, 46, 3421, 374, 354}
			a := newSeq(t, m)
			forward(t, a, v, batch.Batch{Tokens: promptB})
			batched := forward(t, a, v, batch.Batch{Tokens: chain, Outputs: seqs(5)})
			b := newSeq(t, m)
			forward(t, b, v, batch.Batch{Tokens: promptB})
			for i, tok := range chain {
				one := forward(t, b, v, batch.Batch{Tokens: []int32{tok}, Outputs: []int32{0}})
				assert.Equal(t, one, batched[i*v:(i+1)*v], "chain position %d", i)
			}
			// Nodes 0, 2, 3 are the chain's first three tokens; 1 and 4 are siblings.
			c := newSeq(t, m)
			forward(t, c, v, batch.Batch{Tokens: promptB})
			tree := forward(t, c, v, batch.Batch{
				Tokens:  []int32{116, 9, 46, 3421, 10},
				Tree:    mustTree([]int32{-1, -1, 0, 2, 2}),
				Outputs: []int32{3, 0, 2}})
			assert.Equal(t, batched[2*v:3*v], tree[:v], "tree node 3")
			assert.Equal(t, batched[:v], tree[v:2*v], "tree node 0")
			assert.Equal(t, batched[v:2*v], tree[2*v:3*v], "tree node 2")
			// The chain again, in one forward with a decode step of another sequence
			// and the prompt of a third.
			d, e, g := newSeq(t, m), newSeq(t, m), newSeq(t, m)
			forward(t, d, v, batch.Batch{Tokens: promptB})
			forward(t, e, v, batch.Batch{Tokens: promptA[:9]})
			work := []model.Work{
				{Seq: e, Batch: batch.Batch{Tokens: promptA[9:10], Outputs: []int32{0}}, Logits: make([]float32, v)},
				{Seq: d, Batch: batch.Batch{Tokens: chain, Outputs: seqs(5)}, Logits: make([]float32, 5*v)},
				{Seq: g, Batch: batch.Batch{Tokens: promptA[:20], Outputs: []int32{19}}, Logits: make([]float32, v)},
			}
			require.NoError(t, m.Forward(context.Background(), work))
			assert.Equal(t, batched, work[1].Logits, "the chain beside other sequences")
			assert.Equal(t, forward(t, newSeq(t, m), v, batch.Batch{Tokens: promptA[:10], Outputs: []int32{9}}),
				work[0].Logits, "a decode step beside other sequences")
		})
	}
}
