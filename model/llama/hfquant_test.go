package llama

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/internal/sharedtest"
)

// logitErrors returns the largest absolute and relative (to max(1, |logit|)) errors
// of a model's logits, teacher-forced along the reference's greedy path, at the
// reference's top-5 ids.
func logitErrors(t *testing.T, m *Model, c goldenCase) (abs, rel float64) {
	_, logits := greedy(t, m, c.PromptIDs, len(c.TopLogits), c.GreedyIDs)
	for step, top := range c.TopLogits {
		for j, id := range top.IDs {
			d := math.Abs(float64(logits[step][id]) - top.Logits[j])
			abs = math.Max(abs, d)
			rel = math.Max(rel, d/math.Max(1, math.Abs(top.Logits[j])))
		}
	}
	return abs, rel
}

// TestGoldenQuantized checks the quantized checkpoints (AWQ GEMM, GPTQ v1 act-order,
// compressed-tensors W4A16, GPTQ v2 8-bit, FP8 blocks) against the known answers a
// float64 reference computed from the same files: greedy ids exact, and logits
// within a relative tolerance. Layers served as float32 (GPTQ act-order, FP8) are
// within 5e-5 (measured: at most 1.0e-5; the reference's logits are rounded to 4
// decimals). Layers repacked exactly into Q8_0, Q4_0 or Q4_Z run on the integer
// kernels, which round activations to 8 bits: within 0.02 (measured: at most 0.0086,
// GPTQ 8-bit; 0.0043 AWQ, as Q4_Z the same bits as its earlier Q8_0 repacking;
// 0.0026 W4A16).
func TestGoldenQuantized(t *testing.T) {
	for _, c := range []struct {
		name string
		typ  dtype.DType // of the linear layers' weights
		tol  float64
	}{
		{"gocoder-m-awq", dtype.Q4_Z, 0.02}, {"gocoder-m-gptq", dtype.F32, 5e-5}, {"gocoder-m-w4a16", dtype.Q4_0, 0.02},
		{"gocoder-s-gptq8", dtype.Q8_0, 0.02}, {"gocoder-s-fp8", dtype.F32, 5e-5},
	} {
		t.Run(c.name, func(t *testing.T) {
			golden(t, c.name, c.typ, c.tol)
		})
	}
}

// golden checks one quantized checkpoint's known answers, and the type its linear
// layers load as.
func golden(t *testing.T, name string, typ dtype.DType, tol float64) {
	dir := sharedtest.Path(t, "models", name)
	tensors, err := OpenTensors(dir)
	require.NoError(t, err)
	got, _, _, ok := tensors.Lookup("model.layers.0.mlp.down_proj.weight")
	require.True(t, ok)
	assert.Equal(t, typ, got, "layer type")
	require.NoError(t, tensors.Close())
	m, err := Open(dir, Options{Backend: cpu.Factory(2)})
	require.NoError(t, err)
	defer m.Close()
	for _, c := range loadGolden(t, name) {
		abs, rel := logitErrors(t, m, c)
		assert.Less(t, rel, tol, "logit error")
		ids, _ := greedy(t, m, c.PromptIDs, len(c.GreedyIDs), nil)
		assert.Equal(t, c.GreedyIDs, ids, "greedy continuation")
		t.Logf("%s: logit error %.2g (relative %.2g)", c.File, abs, rel)
	}
}

// TestQuantizedRequantize loads a 4-bit checkpoint with its dense weights
// requantized to Q8_0: close to the known answers, not exact. GPTQ act-order's
// layers are dense (AWQ's load as their exact Q4_Z repacking, which Requantize
// leaves as they are).
func TestQuantizedRequantize(t *testing.T) {
	name := "gocoder-m-gptq"
	cases := loadGolden(t, name)
	m, err := Open(sharedtest.Path(t, "models", name), Options{Backend: cpu.Factory(2), Requantize: dtype.Q8_0})
	require.NoError(t, err)
	defer m.Close()
	abs, _ := logitErrors(t, m, cases[0])
	t.Logf("Q8_0 from GPTQ act-order: largest logit error %.3g", abs)
	assert.Less(t, abs, 0.1)
}

// TestQuantizedErrors opens the shards of a shared checkpoint under a config.json
// that describes them wrongly: the error names the file and the key or tensor.
func TestQuantizedErrors(t *testing.T) {
	src := sharedtest.Path(t, "models", "gocoder-s-gptq8")
	raw, err := os.ReadFile(filepath.Join(src, "config.json"))
	require.NoError(t, err)
	v2 := `"checkpoint_format": "gptq_v2"`
	require.Contains(t, string(raw), v2)
	cases := []struct{ name, from, to, want string }{
		{"unknown bits", `"bits": 8`, `"bits": 3`, `config.json: quantization_config: bits 3 is not supported`},
		{"unknown method", `"quant_method": "gptq"`, `"quant_method": "exl2"`, `quant_method "exl2" is not supported`},
		{"not AWQ", `"quant_method": "gptq"`, `"quant_method": "awq", "version": "gemm"`, `quantization_config: bits 8 is not supported ([4] are)`},
		{"groups do not divide", `"group_size": 128`, `"group_size": 96`,
			`model-00002-of-00003.safetensors: tensor "model.layers.0.self_attn.o_proj.qweight": 256 inputs do not divide into groups of group_size 96`},
		{"wrong layout", `"bits": 8`, `"bits": 4`, `tensor "model.layers.0.self_attn.o_proj.qzeros": shape [2 64], want [4 32]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			entries, err := os.ReadDir(src)
			require.NoError(t, err)
			for _, e := range entries {
				if strings.HasSuffix(e.Name(), ".json") && e.Name() != "model.safetensors.index.json" {
					continue
				}
				require.NoError(t, os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dir, e.Name())))
			}
			require.Contains(t, string(raw), c.from)
			cfg := strings.Replace(string(raw), c.from, c.to, 1)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644))
			_, err = Open(dir, Options{Backend: cpu.Factory(1)})
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// TestQuantizedProgress: loading a quantized checkpoint reports its progress in the
// bytes of the files, in order, ending at the total.
func TestQuantizedProgress(t *testing.T) {
	checkProgress(t, sharedtest.Path(t, "models", "gocoder-s-gptq8"), 10)
}
