package llama

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/gpu"
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
// within a relative tolerance. Layers served as float32 (GPTQ act-order) or as
// F8_E4M3_B128 (FP8: its e4m3 codes, on float kernels that compute with exactly the
// dense float32 values, the same logits bit for bit) are within 5e-5 (measured: at
// most 1.0e-5 relative, 5.1e-5 absolute; the reference's logits are rounded to 4
// decimals). Layers repacked exactly into Q8_0, Q4_0, Q4_Z or Q4_Z128 run on the
// integer kernels, which round activations to 8 bits: within 0.02 (measured: at most
// 0.0086, GPTQ 8-bit; 0.0026 W4A16; AWQ as Q4_Z128, whose activations are rounded per
// 128 values, 0.0051 (as Q4_Z, per 32, it was 0.0043); GPTQ act-order as Q4_Z128, its
// inputs sorted by group and each product's activations gathered into that order,
// 0.0069 (as Q4_Z 0.0038). The closest greedy choice, GPTQ's third case at step 13,
// wins by 0.006 logits as Q4_Z128, 0.021 as Q4_Z; with the K-quants' 256-value
// activation blocks it was lost, by 0.018.)
func TestGoldenQuantized(t *testing.T) {
	for _, c := range []struct {
		name     string
		typ      dtype.DType // of the linear layers' weights
		permuted bool        // act-order: their columns sorted by group
		tol      float64
	}{
		{"gocoder-m-awq", dtype.Q4_Z128, false, 0.02}, {"gocoder-m-gptq", dtype.Q4_Z128, true, 0.02},
		{"gocoder-m-w4a16", dtype.Q4_0, false, 0.02}, {"gocoder-s-gptq8", dtype.Q8_0, false, 0.02},
		{"gocoder-s-fp8", dtype.F8_E4M3_B128, false, 5e-5},
	} {
		t.Run(c.name, func(t *testing.T) {
			golden(t, c.name, c.typ, c.permuted, c.tol)
		})
	}
}

// golden checks one quantized checkpoint's known answers, and the type its linear
// layers load as (and whether with their columns permuted: then Tensors.Lookup
// serves the dense F32 matrix, in input order).
func golden(t *testing.T, name string, typ dtype.DType, permuted bool, tol float64) {
	dir := sharedtest.Path(t, "models", name)
	tensors, err := OpenTensors(dir)
	require.NoError(t, err)
	for l := range 8 {
		for _, part := range []string{"self_attn.q_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.down_proj"} {
			layer := fmt.Sprintf("model.layers.%d.%s.weight", l, part)
			f, err := tensors.src.(checkedSource).lookupChecked(layer)
			require.NoError(t, err)
			if !f.ok { // gocoder-s has 4 layers
				continue
			}
			assert.Equal(t, typ, f.t, "%s: type", layer)
			assert.Equal(t, permuted, f.perm != nil, "%s: permuted", layer)
			got, _, _, ok := tensors.Lookup(layer)
			require.True(t, ok)
			if permuted {
				assert.Equal(t, dtype.F32, got, "%s: Lookup in input order", layer)
			} else {
				assert.Equal(t, typ, got, layer)
			}
		}
	}
	if permuted {
		checkFusedOrders(t, tensors)
	}
	require.NoError(t, tensors.Close())
	m, err := Open(dir, cpu.Factory(2), Options{})
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

// checkFusedOrders checks that the act-order layers fused into one matrix (Q, K, V;
// gate, up) have different column orders in every layer of the checkpoint (its
// ranking of inputs is each weight's own), so that the golden test runs fused parts
// each reading its own gathered input.
func checkFusedOrders(t *testing.T, tensors *Tensors) {
	for l := range 8 {
		for _, fused := range [][]string{{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}, {"mlp.gate_proj", "mlp.up_proj"}} {
			var perms [][]int32
			for _, part := range fused {
				f, err := tensors.src.(checkedSource).lookupChecked(fmt.Sprintf("model.layers.%d.%s.weight", l, part))
				require.NoError(t, err)
				perms = append(perms, f.perm)
			}
			for i := 1; i < len(perms); i++ {
				assert.False(t, backend.SamePerm(perms[0], perms[i]), "layer %d: %s and %s in one order", l, fused[0], fused[i])
			}
		}
	}
}

// TestQuantizedRequantize loads a checkpoint with its dense weights requantized to
// Q8_0: close to the known answers, not exact. FP8's layers run on the float kernels
// and are converted (the integer formats', GPTQ act-order's too, load as their exact
// integer repacking, which Requantize leaves as it is).
func TestQuantizedRequantize(t *testing.T) {
	name := "gocoder-s-fp8"
	cases := loadGolden(t, name)
	m, err := Open(sharedtest.Path(t, "models", name), cpu.Factory(2), Options{Requantize: dtype.Q8_0})
	require.NoError(t, err)
	defer m.Close()
	abs, _ := logitErrors(t, m, cases[0])
	t.Logf("Q8_0 from FP8: largest logit error %.3g", abs)
	assert.Less(t, abs, 0.1)
	assert.Greater(t, abs, 1e-3, "the FP8 layers were not requantized: the logits are the exact ones")
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
			_, err = Open(dir, cpu.Factory(1), Options{})
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

// TestGoldenActOrderHost runs the act-order gocoder-m-gptq on the host device (the
// CUDA backend's plain-Go twin: its gather op, then Q8_0 products): the known greedy
// continuations exactly, logits within the integer kernels' 0.02.
func TestGoldenActOrderHost(t *testing.T) {
	name := "gocoder-m-gptq"
	m, err := Open(sharedtest.Path(t, "models", name), gpu.Factory(gpu.HostDevice(), gpu.BackendOptions{}), Options{})
	require.NoError(t, err)
	defer m.Close()
	for _, c := range loadGolden(t, name) {
		abs, rel := logitErrors(t, m, c)
		assert.Less(t, rel, 0.02, "logit error")
		ids, _ := greedy(t, m, c.PromptIDs, len(c.GreedyIDs), nil)
		assert.Equal(t, c.GreedyIDs, ids, "greedy continuation")
		t.Logf("%s: logit error %.2g (relative %.2g)", c.File, abs, rel)
	}
}

// TestPermutedTableRefused: a layer whose repacking has its columns permuted
// (act-order) is refused as an embedding table or output matrix, naming the file and
// tensor, and taken in as a matrix.
func TestPermutedTableRefused(t *testing.T) {
	tensors, err := OpenTensors(sharedtest.Path(t, "models", "gocoder-m-gptq"))
	require.NoError(t, err)
	defer tensors.Close()
	be := cpu.New(tensors.Config.Shape(), 1)
	defer be.Close()
	name := "model.layers.0.mlp.up_proj.weight"
	l := &loader{src: tensors.src, file: tensors.file, be: be}
	assert.NotNil(t, l.matrix(part{name, 1408, 512}))
	require.NoError(t, l.err)
	assert.Nil(t, l.table(part{name, 1408, 512}))
	require.Error(t, l.err)
	assert.Contains(t, l.err.Error(), `gocoder-m-gptq: tensor "model.layers.0.mlp.up_proj.weight": an embedding table or output matrix with its columns permuted`)
}
