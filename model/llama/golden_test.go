package llama

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/batch"
	"github.com/specula/specula/internal/sharedtest"
	"github.com/specula/specula/model"
)

type goldenCase struct {
	File      string  `json:"file"`
	Weights   string  `json:"weights"`
	PromptIDs []int32 `json:"prompt_ids"`
	GreedyIDs []int32 `json:"greedy_ids"`
	TopLogits []struct {
		IDs    []int32   `json:"ids"`
		Logits []float64 `json:"logits"`
	} `json:"top_logits"`
}

func loadGolden(t *testing.T, name string) []goldenCase {
	raw, err := os.ReadFile(sharedtest.Path(t, "models", name+".golden.json"))
	require.NoError(t, err)
	var g struct {
		Cases []goldenCase `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(raw, &g))
	return g.Cases
}

func argmax(x []float32) int32 {
	b := 0
	for i := range x {
		if x[i] > x[b] {
			b = i
		}
	}
	return int32(b)
}

// greedy forwards the prompt and then, one at a time, either the given tokens (teacher
// forcing) or, when force is nil, its own argmax; it returns the argmax before each step
// and the logits.
func greedy(t *testing.T, m model.Model, prompt []int32, n int, force []int32) ([]int32, [][]float32) {
	ctx := context.Background()
	seq, err := m.NewSequence(ctx)
	require.NoError(t, err)
	defer seq.Close()
	v := m.Info().VocabSize
	var out []int32
	var all [][]float32
	in := prompt
	for i := range n {
		logits := make([]float32, v)
		require.NoError(t, seq.Forward(ctx, batch.Batch{Tokens: in, Outputs: []int32{int32(len(in) - 1)}}, logits))
		all = append(all, logits)
		next := argmax(logits)
		out = append(out, next)
		if force != nil {
			next = force[i]
		}
		in = []int32{next}
	}
	return out, all
}

// checkGolden compares a model's logits (teacher-forced along the reference's greedy
// path) and its own greedy output with PyTorch's float32 reference, and returns the
// largest logit error seen, relative to max(1, |logit|).
func checkGolden(t *testing.T, m model.Model, c goldenCase, tol float64, exact bool) float64 {
	_, logits := greedy(t, m, c.PromptIDs, len(c.TopLogits), c.GreedyIDs)
	var worst float64
	for step, top := range c.TopLogits {
		for j, id := range top.IDs {
			e := math.Abs(float64(logits[step][id])-top.Logits[j]) / math.Max(1, math.Abs(top.Logits[j]))
			worst = math.Max(worst, e)
		}
	}
	assert.Less(t, worst, tol, "logit error")
	got, _ := greedy(t, m, c.PromptIDs, len(c.GreedyIDs), nil)
	if exact {
		assert.Equal(t, c.GreedyIDs, got, "greedy continuation")
	} else {
		same := 0
		for same < len(got) && got[same] == c.GreedyIDs[same] {
			same++
		}
		t.Logf("greedy continuation agrees for %d of %d tokens", same, len(got))
	}
	return worst
}

func TestGoldenGocoder(t *testing.T) {
	for _, name := range []string{"gocoder-xs", "gocoder-s", "gocoder-m"} {
		cases := loadGolden(t, name)
		for _, format := range []struct{ path, match string }{
			{name, "model.safetensors"},
			{name + "-f16.gguf", "f16.gguf"},
		} {
			t.Run(name+"/"+format.match, func(t *testing.T) {
				m, err := Open(sharedtest.Path(t, "models", format.path), cpu.Factory(0), Options{})
				require.NoError(t, err)
				defer m.Close()
				for _, c := range cases {
					if strings.HasSuffix(c.File, format.match) {
						worst := checkGolden(t, m, c, 1e-3, true)
						t.Logf("%s: worst logit error %.2g", c.File, worst)
					}
				}
			})
		}
	}
}

// TestGoldenQ8 compares the Q8_0 files with the F16 answers: close, not exact.
func TestGoldenQ8(t *testing.T) {
	for _, name := range []string{"gocoder-xs", "gocoder-s", "gocoder-m"} {
		t.Run(name, func(t *testing.T) {
			m, err := Open(sharedtest.Path(t, "models", name+"-q8_0.gguf"), cpu.Factory(0), Options{})
			require.NoError(t, err)
			defer m.Close()
			for _, c := range loadGolden(t, name) {
				if strings.HasSuffix(c.File, "f16.gguf") {
					worst := checkGolden(t, m, c, 0.05, false)
					t.Logf("worst logit error against F16: %.3g", worst)
				}
			}
		})
	}
}

func TestGoldenQwen2(t *testing.T) {
	cases := loadGolden(t, "tiny-qwen2-random")
	for _, path := range []string{"tiny-qwen2-random", "tiny-qwen2-random-f32.gguf"} {
		t.Run(path, func(t *testing.T) {
			m, err := Open(sharedtest.Path(t, "models", path), cpu.Factory(0), Options{})
			require.NoError(t, err)
			defer m.Close()
			assert.True(t, m.Config().QKVBias)
			for _, c := range cases {
				worst := checkGolden(t, m, c, 1e-3, true)
				t.Logf("worst logit error %.2g", worst)
			}
		})
	}
}

func TestGoldenStories260K(t *testing.T) {
	m, err := Open(sharedtest.Path(t, "models", "stories260K.gguf"), cpu.Factory(0), Options{})
	require.NoError(t, err)
	defer m.Close()
	want := []int32{432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265,
		282, 295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352, 266, 268, 388, 426, 338, 391, 266, 267, 337, 335,
		312, 432, 398, 312, 286, 267, 414, 270, 333, 415, 426, 13, 438, 310, 439, 419, 357, 336}
	got, _ := greedy(t, m, []int32{1, 403, 407, 261, 378}, len(want), nil)
	assert.Equal(t, want, got)
}

// TestSameModelBothFormats checks that the GGUF F16 and safetensors BF16 copies of one
// model agree closely (their weights differ by the rounding of BF16 versus F16).
func TestSameModelBothFormats(t *testing.T) {
	hf, err := Open(sharedtest.Path(t, "models", "gocoder-s"), cpu.Factory(0), Options{})
	require.NoError(t, err)
	defer hf.Close()
	gg, err := Open(sharedtest.Path(t, "models", "gocoder-s-f16.gguf"), cpu.Factory(0), Options{})
	require.NoError(t, err)
	defer gg.Close()
	c := loadGolden(t, "gocoder-s")[0]
	a, la := greedy(t, hf, c.PromptIDs, 16, nil)
	b, lb := greedy(t, gg, c.PromptIDs, 16, nil)
	assert.Equal(t, a, b)
	var worst float64
	for i := range la {
		for j := range la[i] {
			worst = math.Max(worst, math.Abs(float64(la[i][j]-lb[i][j])))
		}
	}
	t.Logf("largest logit difference between the formats: %.3g", worst)
	assert.Less(t, worst, 0.1)
}
