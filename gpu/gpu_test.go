package gpu

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/model"
	"github.com/specula/specula/model/llama"
)

// gpuTol bounds the difference between a GPU's logits and the CPU runtime's (or the
// host device's). Decoding and drafts (batches of up to 32 tokens) run in float32 with
// fused multiply-adds; prompts of more than 32 tokens go to cuBLAS with activations
// rounded to the weights' type (F16 or BF16), which costs most of the budget.
const gpuTol = 0.1

// The GPU opened once for all GPU tests, closed by TestMain.
var (
	gpuOnce sync.Once
	gpuDev  *Device
	gpuErr  error
)

// TestMain closes the shared GPU after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if gpuDev != nil {
		if err := gpuDev.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "closing the GPU:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// openGPU returns the shared GPU, skipping the test with Available's message where
// there is none.
func openGPU(t *testing.T) *Device {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	gpuOnce.Do(func() {
		gpuDev, gpuErr = OpenDevice(DeviceOptions{})
		if gpuErr == nil {
			fmt.Fprintln(os.Stderr, "GPU:", gpuDev.Info())
		}
	})
	require.NoError(t, gpuErr, "OpenDevice after Available succeeded")
	return gpuDev
}

// gpuEnv runs the paged key/value checks on the GPU.
func gpuEnv() kvEnv {
	return kvEnv{dev: openGPU, tol: gpuTol}
}

// TestGPUInfo opens the GPU and checks what it reports.
func TestGPUInfo(t *testing.T) {
	dev := openGPU(t)
	info := dev.Info()
	t.Logf("%s", info)
	t.Logf("libraries: %v", info.Libraries)
	assert.Equal(t, "cuda", info.Backend)
	assert.NotEmpty(t, info.Name)
	assert.Greater(t, info.ComputeCapability, 0)
	assert.Greater(t, info.PeakBandwidth, 0.0)
	assert.NotEmpty(t, info.KernelTarget)
	free, total, err := dev.MemoryInfo()
	require.NoError(t, err)
	t.Logf("memory: %.1f GiB free of %.1f GiB", float64(free)/(1<<30), float64(total)/(1<<30))
	assert.Greater(t, total, int64(0))
	require.NoError(t, dev.Synchronize())
}

// TestGPUKernelsCompileOnDevice checks the kernels NVRTC built for the device: every
// kernel the backend launches was found in the module.
func TestGPUKernelsCompileOnDevice(t *testing.T) {
	dev := openGPU(t)
	for _, k := range kernelNames() {
		assert.NotZero(t, dev.cuda.fns[k], k)
	}
}

// TestGPUMatchesCPU is [TestHostMatchesCPU] on the GPU: every step of [script] within
// [gpuTol] of model/llama on the gocoder-xs files, and 32 tokens of greedy continuation
// identical.
func TestGPUMatchesCPU(t *testing.T) {
	dev := openGPU(t)
	for _, f := range modelFiles() {
		t.Run(f.name, func(t *testing.T) {
			path := f.path(t)
			cpu := openCPU(t, path)
			g := openOn(t, dev, path)
			worst := runScript(t, cpu, g, script(promptA), gpuTol)
			t.Logf("%s: max |gpu − cpu| logit difference %.3g", f.name, worst)
			assert.LessOrEqual(t, worst, gpuTol)
			want, got := greedy(t, cpu, promptB, 32), greedy(t, g, promptB, 32)
			assert.Equal(t, want, got, "greedy continuation")
		})
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

// TestGPUMatchesHostRandom compares the GPU with the host device on random-weight
// models of every weight type and both rotary layouts — the same weights on both, as
// the fill kernels reproduce the host's values — with a prompt of 80 tokens (cuBLAS for
// F32, F16, BF16) and every step of [script].
func TestGPUMatchesHostRandom(t *testing.T) { checkMatchesHostRandom(t, openGPU(t), gpuTol) }

// TestHostRandomScript is [TestGPUMatchesHostRandom] between two host devices: the
// runner is deterministic, and the script suits the random models.
func TestHostRandomScript(t *testing.T) { checkMatchesHostRandom(t, HostDevice(), 0) }

func checkMatchesHostRandom(t *testing.T, dev *Device, tol float64) {
	ctx := context.Background()
	prompt := make([]int32, 80)
	for i := range prompt {
		prompt[i] = int32(i*37+11) % 100
	}
	for _, typ := range randomTypes {
		for _, style := range []llama.RopeStyle{llama.RopeInterleaved, llama.RopeHalf} {
			t.Run(fmt.Sprintf("%s/style%d", typ, style), func(t *testing.T) {
				cfg := tinyConfig(style)
				cfg.Vocab = 1000
				host, err := NewRandom(ctx, HostDevice(), cfg, typ, 3, testOpts)
				require.NoError(t, err)
				defer host.Close()
				g, err := NewRandom(ctx, dev, cfg, typ, 3, testOpts)
				require.NoError(t, err)
				defer g.Close()
				worst := runScript(t, host, g, modScript(prompt, cfg.Vocab), tol)
				t.Logf("max |%s − host| %.3g", dev.Info().Backend, worst)
				assert.LessOrEqual(t, worst, tol)
			})
		}
	}
}

// TestGPUBatchInvariance checks what greedy speculative decoding relies on: a token's
// logits on the GPU are bit-identical whether it is forwarded alone, in a chain of 5,
// or as a node of a tree.
func TestGPUBatchInvariance(t *testing.T) { checkBatchInvariance(t, openGPU(t)) }

// TestHostBatchInvariance is [TestGPUBatchInvariance] on the host device.
func TestHostBatchInvariance(t *testing.T) { checkBatchInvariance(t, HostDevice()) }

func checkBatchInvariance(t *testing.T, dev *Device) {
	for _, f := range modelFiles()[:2] {
		t.Run(f.name, func(t *testing.T) {
			m := openOn(t, dev, f.path(t))
			v := m.Info().VocabSize
			chain := []int32{116, 46, 3421, 374, 354}
			a := newSeq(t, m)
			forward(t, a, v, model.Batch{Tokens: promptB})
			batched := forward(t, a, v, model.Batch{Tokens: chain, Outputs: seqs(5)})
			b := newSeq(t, m)
			forward(t, b, v, model.Batch{Tokens: promptB})
			for i, tok := range chain {
				one := forward(t, b, v, model.Batch{Tokens: []int32{tok}, Outputs: []int32{0}})
				assert.Equal(t, one, batched[i*v:(i+1)*v], "chain position %d", i)
			}
			// Nodes 0, 2, 3 are the chain's first three tokens; 1 and 4 are siblings.
			c := newSeq(t, m)
			forward(t, c, v, model.Batch{Tokens: promptB})
			tree := forward(t, c, v, model.Batch{
				Tokens:  []int32{116, 9, 46, 3421, 10},
				Tree:    mustTree([]int32{-1, -1, 0, 2, 2}),
				Outputs: []int32{3, 0, 2}})
			assert.Equal(t, batched[2*v:3*v], tree[:v], "tree node 3")
			assert.Equal(t, batched[:v], tree[v:2*v], "tree node 0")
			assert.Equal(t, batched[v:2*v], tree[2*v:3*v], "tree node 2")
		})
	}
}

// TestGPUSpecGreedyIdentical is [TestSpecGreedyIdentical] with a GPU target, and with
// CPU and GPU drafters.
func TestGPUSpecGreedyIdentical(t *testing.T) {
	dev := openGPU(t)
	targetPath := repoModel(t, "gocoder-xs-q8_0.gguf")
	draftPath := xsDraftPath(targetPath)
	target := openOn(t, dev, targetPath)
	cpuDraft, err := draft.NewModel(openCPU(t, draftPath))
	require.NoError(t, err)
	gpuDraftModel := openOn(t, dev, draftPath)
	gpuDraft, err := draft.NewModel(gpuDraftModel)
	require.NoError(t, err)
	gpuTree, err := draft.NewModelTree(gpuDraftModel, draft.Tree{Width: 2, Depth: 3, MaxNodes: 6})
	require.NoError(t, err)
	checkGreedyIdentical(t, target, []drafterCase{
		{"cpu-draft-k4", cpuDraft, 4},
		{"gpu-draft-k4", gpuDraft, 4},
		{"gpu-tree-k6", gpuTree, 6},
		{"ngram-k5", draft.NGram{}, 5},
	}, false)
}

// TestGPUPagedKV runs the paged key/value checks (truncate, fork, retain after a tree,
// the budget, cancellation, bad inputs) on the GPU.
func TestGPUPagedKV(t *testing.T) {
	k := gpuEnv()
	openGPU(t)
	for _, c := range []struct {
		name  string
		check func(*testing.T, kvEnv)
	}{
		{"Truncate", checkTruncate},
		{"Fork", checkFork},
		{"RetainAfterTree", checkRetainAfterTree},
		{"KVBudget", checkKVBudget},
		{"Cancelled", checkCancelled},
		{"BadInputs", checkBadInputs},
	} {
		t.Run(c.name, func(t *testing.T) { c.check(t, k) })
	}
}
