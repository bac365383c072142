package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/gpu"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/model/synth"
)

// TestRunHost runs the benchmark's core on the host device with the tiny shape and
// checks that every figure is filled in and the JSON report round-trips.
func TestRunHost(t *testing.T) {
	var out bytes.Buffer
	c := config{Shapes: []string{"tiny"}, Types: []string{"F16", "q8_0"}, Context: 20, Steps: 4, Repeats: 2, VerifyK: 5, Seed: 3}
	rep, err := run(context.Background(), gpu.HostDevice(), c, &out)
	require.NoError(t, err, out.String())
	require.Len(t, rep.Results, 2)
	for _, r := range rep.Results {
		assert.Empty(t, r.Error)
		assert.Equal(t, "tiny", r.Shape)
		want, _ := shape(tiny)
		assert.Equal(t, synth.Count(want), r.Params)
		assert.Greater(t, r.DecodeBytes, int64(0))
		// A decoding step reads every matrix but the embedding, and one row of that:
		// with tied embeddings (the tiny shape's) the output matrix is the embedding,
		// read whole by the logits and one row more by the lookup.
		typ, err := dtype.Parse(r.Type)
		require.NoError(t, err)
		row, err := typ.Bytes(int64(want.Dim))
		require.NoError(t, err)
		require.True(t, want.TiedEmbeddings)
		assert.Equal(t, r.WeightBytes+row, r.DecodeBytes)
		assert.Greater(t, r.DecodeTokensPerS, 0.0)
		assert.Greater(t, r.PrefillTokensPerS, 0.0)
		assert.Greater(t, r.VerifyRatio, 0.0)
		assert.Greater(t, r.BandwidthGBs, 0.0)
		assert.Zero(t, r.BandwidthFraction, "the host device has no peak")
	}
	assert.Equal(t, "Q8_0", rep.Results[1].Type)
	assert.Contains(t, out.String(), "verify ratio")
	path := filepath.Join(t.TempDir(), "r.json")
	require.NoError(t, writeJSON(path, rep))

	var back report
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, rep.Results, back.Results)
}

// TestRunErrors checks bad configurations and that a cancelled run reports the
// cancellation.
func TestRunErrors(t *testing.T) {
	base := config{Shapes: []string{"tiny"}, Types: []string{"F16"}, Context: 8, Steps: 2, Repeats: 1, VerifyK: 2}
	for _, c := range []struct {
		name string
		edit func(*config)
		want string
	}{
		{"shape", func(c *config) { c.Shapes = []string{"13b"} }, "unknown shape"},
		{"type", func(c *config) { c.Types = []string{"F12"} }, "unknown type"},
		{"steps", func(c *config) { c.Steps = 0 }, "must be positive"},
	} {
		cfg := base
		c.edit(&cfg)
		_, err := run(context.Background(), gpu.HostDevice(), cfg, &bytes.Buffer{})
		assert.ErrorContains(t, err, c.want, c.name)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := run(ctx, gpu.HostDevice(), base, &bytes.Buffer{})
	assert.ErrorIs(t, err, context.Canceled)
}

// TestShapes: gpubench measures the shapes of the CPU's real-scale table, under the
// same names, and a tiny one for the host.
func TestShapes(t *testing.T) {
	for _, s := range synth.Shapes() {
		c, err := shape(s.Name)
		require.NoError(t, err)
		assert.Equal(t, s.Config, c, s.Name)
	}
	c, err := shape(tiny)
	require.NoError(t, err)
	assert.Equal(t, 128, c.Dim)
	assert.Equal(t, c.Dim, c.Heads*c.HeadDim)
	_, err = shape("0.5b")
	assert.ErrorContains(t, err, `unknown shape "0.5b" (known: smollm2-135m`)
}

// TestDecodeBytes checks the weight memory of a decoding step against the matrices'
// sizes, for tied and untied embeddings and every weight type random models are made
// of: every layer, the output matrix and one row of the embedding.
func TestDecodeBytes(t *testing.T) {
	for _, typ := range []dtype.DType{dtype.F32, dtype.F16, dtype.BF16, dtype.Q8_0} {
		for _, tied := range []bool{true, false} {
			cfg, err := shape(tiny)
			require.NoError(t, err)
			cfg.TiedEmbeddings = tied
			m, err := llama.NewRandom(cfg, typ, 1, gpu.Factory(gpu.HostDevice(), gpu.BackendOptions{}), llama.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = m.Close() })
			rb := func(cols int) int64 {
				b, err := typ.Bytes(int64(cols))
				require.NoError(t, err)
				return b
			}
			c := m.Config()
			q := c.Heads * c.HeadDim
			perLayer := int64(q+2*c.KVHeads*c.HeadDim)*rb(c.Dim) + int64(c.Dim)*rb(q) +
				int64(2*c.FFN)*rb(c.Dim) + int64(c.Dim)*rb(c.FFN)
			got, err := decodeBytes(m, typ)
			require.NoError(t, err)
			assert.Equal(t, int64(c.Layers)*perLayer+int64(c.Vocab)*rb(c.Dim)+rb(c.Dim), got, "%s, tied %v", typ, tied)
		}
	}
}
