package llama_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/batch"
	"github.com/specula/specula/gpu"
	"github.com/specula/specula/internal/sharedtest"
	"github.com/specula/specula/model/llama"
)

// statesOf forwards toks through m asking the final states (and the stream after
// layer 0) of a few rows, and the logits of two of them, cut into passes when the
// backend's are small.
func statesOf(t *testing.T, m *llama.Model, toks []int32) ([]float32, []float32) {
	t.Helper()
	s, err := m.NewSequence(context.Background())
	require.NoError(t, err)
	defer s.Close()
	d, v := m.Info().HiddenSize, m.Info().VocabSize
	b := batch.Batch{Tokens: toks, Outputs: []int32{3, 9}, States: []int32{1, 3, 9, 12}, StateLayers: []int32{0},
		Hidden: make([]float32, 4*2*d)}
	logits := make([]float32, 2*v)
	require.NoError(t, s.Forward(context.Background(), b, logits))
	return b.Hidden, logits
}

// TestHostStates checks that a model on the host device gives the hidden states the
// CPU backend gives — the final normed ones and the stream after a layer — within
// [hostTol], also when the forward is cut into passes.
func TestHostStates(t *testing.T) { checkStates(t, gpu.HostDevice()) }

// TestGPUStates is [TestHostStates] on a GPU, within [gpuTol].
func TestGPUStates(t *testing.T) { checkStates(t, openGPU(t)) }

func checkStates(t *testing.T, dev *gpu.Device) {
	path := xsPath(t)
	cpu := openCPU(t, path)
	tol := hostTol
	if dev.Info().Kind == "cuda" {
		tol = gpuTol
	}
	for _, batch := range []int{0, 5} {
		dm := openOn(t, dev, path, gpu.Factory(dev, gpu.BackendOptions{MaxBatch: batch}), llama.Options{})
		wantH, wantL := statesOf(t, cpu, promptA[:16])
		gotH, gotL := statesOf(t, dm, promptA[:16])
		assert.LessOrEqual(t, maxAbsDiff(wantH, gotH), tol, "states, passes of %d", batch)
		assert.LessOrEqual(t, maxAbsDiff(wantL, gotL), tol, "logits, passes of %d", batch)
		var nonzero int
		for _, x := range gotH {
			if x != 0 {
				nonzero++
			}
		}
		assert.Greater(t, nonzero, len(gotH)/2, "the states were written")
	}
}

// TestHostEAGLE runs gocoder-m's EAGLE layer on the host device and on the CPU: the
// layer's inputs (Batch.Inputs), its missing norms and its states must come out the
// same, within [hostTol]; skipped without ../shared.
func TestHostEAGLE(t *testing.T) {
	dir := sharedtest.Path(t, "models", "gocoder-m-eagle")
	tp := sharedtest.Path(t, "models", "gocoder-m-f16.gguf")
	run := func(f backend.Factory, opts llama.Options) ([]float32, []float32) {
		e, err := llama.OpenEAGLE(dir, tp, f, opts)
		require.NoError(t, err)
		defer e.Close()
		s, err := e.NewSequence(context.Background())
		require.NoError(t, err)
		defer s.Close()
		d, v := e.Info().HiddenSize, e.Info().VocabSize
		toks := promptA[:6]
		in := make([]float32, len(toks)*d)
		for i := range in {
			in[i] = float32(i%7) * 0.1
		}
		b := batch.Batch{Tokens: toks, Inputs: in, Outputs: []int32{5, 2}, States: []int32{5}, Hidden: make([]float32, d)}
		logits := make([]float32, 2*v)
		require.NoError(t, s.Forward(context.Background(), b, logits))
		return b.Hidden, logits
	}
	wantH, wantL := run(cpu.Factory(1), llama.Options{})
	gotH, gotL := run(gpu.Factory(gpu.HostDevice(), gpu.BackendOptions{MaxBatch: 4}), llama.Options{KVBudget: deviceKV})
	assert.LessOrEqual(t, maxAbsDiff(wantH, gotH), hostTol, "states")
	assert.LessOrEqual(t, maxAbsDiff(wantL, gotL), hostTol, "logits")
}
