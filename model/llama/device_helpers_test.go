package llama_test

// The checks of models on a device (package gpu): the host reference device against
// the CPU backend, a GPU against both. They live here, in the external test package,
// because they load models: model/llama is given the CUDA backend, it never imports it.
// Every test is named TestHost… (the host device, which runs everywhere) or TestGPU…
// (skipped with gpu.Available's message where there is no GPU):
// gpu/device-check.sh runs them with -test.run '^Test(Host|GPU)'.

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/batch"
	"github.com/specula/specula/gpu"
	"github.com/specula/specula/internal/sharedtest"
	"github.com/specula/specula/model"
	"github.com/specula/specula/model/llama"
)

// Prompts: the ends of two held-out Go files (gocoder-xs.golden.json), so that the
// greedy continuations are code the models have an opinion about.
var (
	promptA = []int32{326, 301, 3532, 46, 1505, 108, 814, 46, 10, 9, 295, 259, 46, 1067, 5685, 2114, 40, 311, 44, 2843,
		41, 671, 281, 116, 46, 3421, 374, 354, 266, 256, 9, 311, 46, 3421, 277, 2843, 10, 9, 125, 10}
	promptB = []int32{295, 259, 2846, 48, 368, 354, 266, 308, 9, 537, 46, 3603, 1864, 40, 116, 2436, 44, 279, 403, 1785,
		385, 308, 9, 1217, 742, 46, 6339, 1864, 297, 10}
)

// hostTol bounds the difference between the host device's logits and the CPU
// backend's. Both multiply by the weights with the same kernels; attention and RMSNorm
// add up in other orders, so the logits differ by float32 rounding only.
const hostTol = 1e-4

// gpuTol bounds the difference between a GPU's logits and the CPU backend's (or the
// host device's). Decoding and drafts (batches of up to 32 tokens) run in float32 with
// fused multiply-adds; prompts of more than 32 tokens go to cuBLAS with activations
// rounded to the weights' type (F16 or BF16), which costs most of the budget.
const gpuTol = 0.1

// deviceKV is the key/value budget of models loaded on a device by the tests: a small
// pool, allocated at load.
const deviceKV = 8 << 20

// The GPU opened once for all GPU tests. It is not closed: the process ends after the
// tests (package gpu's own tests close theirs).
var (
	gpuOnce sync.Once
	gpuDev  *gpu.Device
	gpuErr  error
)

// openGPU returns the shared GPU, skipping the test with gpu.Available's message
// where there is none.
func openGPU(t testing.TB) *gpu.Device {
	t.Helper()
	if err := gpu.Available(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	gpuOnce.Do(func() {
		gpuDev, gpuErr = gpu.OpenDevice(gpu.DeviceOptions{})
		if gpuErr == nil {
			fmt.Fprintln(os.Stderr, "GPU:", gpuDev.Info())
		}
	})
	require.NoError(t, gpuErr, "OpenDevice after Available succeeded")
	return gpuDev
}

// hostDevice returns a fresh host reference device.
func hostDevice(testing.TB) *gpu.Device { return gpu.HostDevice() }

// repoRoot returns the module root (the directory holding go.mod above the working
// directory).
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// repoModel returns the path of a demo model in the repository's models/, skipping
// the test when it is absent (a checkout without the demo models).
func repoModel(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(repoRoot(t), "models", name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("demo model %s is absent: %v", p, err)
	}
	return p
}

// xsPath is the repository's gocoder-xs Q8_0 file.
func xsPath(t testing.TB) string { return repoModel(t, "gocoder-xs-q8_0.gguf") }

// modelFile is a real model file the device is checked on.
type modelFile struct {
	name string
	path func(t testing.TB) string // skips the test when the file is absent
}

// modelFiles are the gocoder-xs files in every format: the repository's Q8_0 GGUF, and
// from the shared data (when present) the F16 GGUF, the BF16 safetensors directory,
// and the Qwen2 fixture (QKV biases, rotate-half rotary).
func modelFiles() []modelFile {
	return []modelFile{
		{"xs-q8_0-gguf", xsPath},
		{"xs-f16-gguf", func(t testing.TB) string { return sharedtest.Path(t, "models", "gocoder-xs-f16.gguf") }},
		{"xs-bf16-safetensors", func(t testing.TB) string { return sharedtest.Path(t, "models", "gocoder-xs") }},
		{"tiny-qwen2-f32-gguf", func(t testing.TB) string { return sharedtest.Path(t, "models", "tiny-qwen2-random-f32.gguf") }},
	}
}

// openCPU opens a model on the CPU backend, closed at the end of the test.
func openCPU(t testing.TB, path string) *llama.Model {
	t.Helper()
	m, err := llama.Open(path, cpu.Factory(1), llama.Options{KVBudget: 8 << 20})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// openOn opens a model with opts (KVBudget defaulting to [deviceKV]) on the backend b
// makes, dev's when b is nil; it is closed at the end of the test.
func openOn(t testing.TB, dev *gpu.Device, path string, b backend.Factory, opts llama.Options) *llama.Model {
	t.Helper()
	if b == nil {
		b = gpu.Factory(dev, gpu.BackendOptions{})
	}
	if opts.KVBudget == 0 {
		opts.KVBudget = deviceKV
	}
	m, err := llama.Open(path, b, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	return m
}

// forker is a sequence that can fork (llama's do).
type forker interface {
	Fork() (model.Sequence, error)
}

// fork forks s, which must be a llama sequence.
func fork(t testing.TB, s model.Sequence) (model.Sequence, error) {
	t.Helper()
	f, ok := s.(forker)
	require.True(t, ok, "%T has no Fork method", s)
	return f.Fork()
}

// newSeq starts a sequence, closed at the end of the test.
func newSeq(t testing.TB, m model.Model) model.Sequence {
	t.Helper()
	s, err := m.NewSequence(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// forward runs one batch and returns its logits.
func forward(t testing.TB, s model.Sequence, vocab int, b batch.Batch) []float32 {
	t.Helper()
	logits := make([]float32, len(b.Outputs)*vocab)
	require.NoError(t, s.Forward(context.Background(), b, logits))
	return logits
}

// maxAbsDiff is the largest |a[i] − b[i]|.
func maxAbsDiff(a, b []float32) float64 {
	var worst float64
	for i := range a {
		worst = math.Max(worst, math.Abs(float64(a[i])-float64(b[i])))
	}
	return worst
}

// argmax is the index of the largest value (the first of equals).
func argmax(x []float32) int32 {
	best := 0
	for i := range x {
		if x[i] > x[best] {
			best = i
		}
	}
	return int32(best)
}

// gap is the difference between the largest and the second largest value.
func gap(x []float32) float64 {
	a, b := math.Inf(-1), math.Inf(-1)
	for _, v := range x {
		switch f := float64(v); {
		case f > a:
			a, b = f, a
		case f > b:
			b = f
		}
	}
	return a - b
}

// greedy forwards the prompt, then n times its own argmax, and returns the n tokens.
func greedy(t testing.TB, m model.Model, prompt []int32, n int) []int32 {
	t.Helper()
	s := newSeq(t, m)
	v := m.Info().VocabSize
	in := prompt
	var out []int32
	for range n {
		logits := forward(t, s, v, batch.Batch{Tokens: in, Outputs: []int32{int32(len(in) - 1)}})
		next := argmax(logits)
		out = append(out, next)
		in = []int32{next}
	}
	return out
}

// seqs returns 0, 1, …, n−1 as int32.
func seqs(n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(i)
	}
	return out
}

// cat concatenates token lists.
func cat(parts ...[]int32) []int32 {
	var out []int32
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// mustTree is the tree of a parent list that a test knows to be valid.
func mustTree(parents []int32) batch.Tree {
	t, err := batch.NewTree(parents)
	if err != nil {
		panic(err)
	}
	return t
}

// sharedFile returns the path of a shared data file and whether it exists, without
// skipping.
func sharedFile(elem ...string) (string, bool) {
	root := sharedtest.Root()
	if root == "" {
		return "", false
	}
	p := filepath.Join(append([]string{root}, elem...)...)
	_, err := os.Stat(p)
	return p, err == nil
}

// xsDraftPath is the draft model for a gocoder-xs Q8_0 target: the F16 file when
// shared data is present (it disagrees with the Q8_0 target now and then, so drafts are
// rejected), else the target's own file.
func xsDraftPath(targetPath string) string {
	if p, ok := sharedFile("models", "gocoder-xs-f16.gguf"); ok {
		return p
	}
	return targetPath
}
