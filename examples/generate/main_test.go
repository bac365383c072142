package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/internal/sharedtest"
)

func demo(t *testing.T) (string, string) {
	m, d := "../../"+defaultModel, "../../"+defaultDraft
	for _, p := range []string{m, d} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("demo model %s is absent", p)
		}
	}
	return m, d
}

// TestRun generates with the demo pair, greedily, and checks the completion against
// plain decoding (the baseline run) and the statistics line.
func TestRun(t *testing.T) {
	m, d := demo(t)
	var out, log bytes.Buffer
	c := config{model: m, draftModel: d, prompt: "func main() {", k: "auto", ngram: true, baseline: true,
		quiet: true, topP: 1, maxTokens: 40}
	require.NoError(t, run(context.Background(), c, &out, &log))
	assert.True(t, strings.HasPrefix(out.String(), "func main() {"), out.String())
	assert.Greater(t, len(out.String()), len("func main() {")+20)
	assert.Regexp(t, `acceptance [0-9.]+, mean accepted [0-9.]+, [0-9.]+ tokens/s\npaired with plain decoding, 3 runs each in turns: [0-9.]+× in the median pair \(speculative [0-9.]+, plain [0-9.]+ tokens/s\); [0-9.]+–[0-9.]+× over the pairs`, log.String())
	assert.Contains(t, log.String(), "40 generated")
	var ratio, speculative, plain float64
	_, err := fmt.Sscanf(log.String()[strings.Index(log.String(), "paired"):], "paired with plain decoding, 3 runs each in turns: %f× in the median pair (speculative %f, plain %f", &ratio, &speculative, &plain)
	require.NoError(t, err, log.String())
	assert.InDelta(t, ratio, speculative/plain, 0.006, "the printed speeds give the printed speedup")

	// Fixed K, no draft model, sampling: still runs; bad flags are plain errors.
	out.Reset()
	c = config{model: m, draftModel: "none", prompt: "package main", k: "3", ngram: true, quiet: true,
		temperature: 0.8, topP: 0.95, seed: 7, maxTokens: 16}
	require.NoError(t, run(context.Background(), c, &out, &log))
	for _, bad := range []config{
		{model: m, draftModel: "none", prompt: "x", k: "lots", topP: 1, maxTokens: 4},
		{model: "nowhere.gguf", draftModel: "none", prompt: "x", k: "auto", topP: 1, maxTokens: 4},
		{model: m, draftModel: "none", prompt: "x", k: "auto", temperature: -1, topP: 1, maxTokens: 4},
	} {
		assert.Error(t, run(context.Background(), bad, &out, &log), "%+v", bad)
	}
}

// TestRunWithHeads generates with gocoder-m drafted by each shared head (trees for
// Medusa and EAGLE), and checks the speculative completion against the baseline's
// statistics line; skipped without ../shared.
func TestRunWithHeads(t *testing.T) {
	target := sharedtest.Path(t, "models", "gocoder-m-f16.gguf")
	for _, c := range []struct{ kind, head, tree string }{
		{"mlp:", "gocoder-m-mlp-speculator", ""},
		{"medusa:", "gocoder-m-medusa", "2,3,8"},
		{"", "gocoder-m-eagle", ""}, // the kind detected
		{"eagle:", "gocoder-m-eagle", "2,4,12"},
	} {
		t.Run(c.kind+c.head+c.tree, func(t *testing.T) {
			var out, log bytes.Buffer
			cfg := config{model: target, head: c.kind + sharedtest.Path(t, "models", c.head), headTree: c.tree, prompt: "func main() {",
				k: "auto", ngram: true, baseline: true, quiet: true, topP: 1, maxTokens: 32}
			require.NoError(t, run(context.Background(), cfg, &out, &log))
			assert.Contains(t, log.String(), "32 generated")
			assert.Regexp(t, `acceptance [0-9.]+, mean accepted`, log.String())
		})
	}
	var out, log bytes.Buffer
	bad := config{model: target, head: sharedtest.Path(t, "models", "gocoder-m-mlp-speculator"), headTree: "2,3,8",
		prompt: "x", k: "3", topP: 1, maxTokens: 4}
	assert.ErrorContains(t, run(context.Background(), bad, &out, &log), "drafts chains")
	bad.headTree = "wide"
	assert.ErrorContains(t, run(context.Background(), bad, &out, &log), "-head-tree")
	bad.headTree, bad.head = "", "eagle:"+sharedtest.Path(t, "models", "gocoder-xs")
	assert.ErrorContains(t, run(context.Background(), bad, &out, &log), "is a full model, not an EAGLE layer: did you mean model:")
}

// TestPairsMedian checks the median pair and the range of speedups the report prints.
func TestPairsMedian(t *testing.T) {
	for _, c := range []struct {
		name   string
		p      pairs
		i      int
		lo, hi float64
	}{
		{"one", pairs{[]float64{300}, []float64{200}}, 0, 1.5, 1.5},
		{"three", pairs{[]float64{3406.4, 2000, 3000}, []float64{3094.8, 1000, 2000}}, 2, 3406.4 / 3094.8, 2},
		{"even, the upper middle", pairs{[]float64{1, 2, 3, 4}, []float64{1, 1, 1, 1}}, 2, 1, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			i, lo, hi := c.p.median()
			assert.Equal(t, c.i, i)
			assert.InDelta(t, c.lo, lo, 1e-12)
			assert.InDelta(t, c.hi, hi, 1e-12)
		})
	}
}
