package safetensors

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/format/dtype"
)

// sharedModels is where the project's real models live, beside the checkout.
const sharedModels = "../../../shared/models"

// TestRealModels opens the shared Hugging Face directories and checks what the models
// are known to hold.
func TestRealModels(t *testing.T) {
	tests := []struct {
		dir    string
		embed  []int64
		dtype  dtype.DType
		qBias  bool
		layers int
	}{
		{"gocoder-m", []int64{8192, 512}, dtype.BF16, false, 8},
		{"gocoder-s", []int64{8192, 256}, dtype.BF16, false, 4},
		{"gocoder-xs", []int64{8192, 128}, dtype.BF16, false, 2},
		{"tiny-qwen2-random", []int64{8192, 128}, dtype.F32, true, 2},
	}
	for _, tc := range tests {
		t.Run(tc.dir, func(t *testing.T) {
			dir := filepath.Join(sharedModels, tc.dir)
			file := filepath.Join(dir, singleName)
			if _, err := os.Stat(file); err != nil {
				t.Skipf("no %s: %v", file, err)
			}
			s, err := OpenDir(dir)
			require.NoError(t, err)
			defer s.Close()
			t.Logf("%s: %d tensors in %v", tc.dir, len(s.Names()), s.Files())
			f, err := Open(file)
			require.NoError(t, err)
			t.Logf("  metadata: %v", f.Metadata())
			require.NoError(t, f.Close())
			for _, name := range []string{
				"model.embed_tokens.weight",
				"model.layers.0.self_attn.q_proj.weight",
				"model.layers.0.self_attn.k_proj.weight",
				"model.norm.weight",
			} {
				tensor, ok := s.Tensor(name)
				require.True(t, ok, name)
				t.Logf("  %s: %s %v", name, tensor.TypeName, tensor.Shape)
				assert.Equal(t, tc.dtype, tensor.DType, name)
				assert.True(t, tensor.Supported(), name)
			}
			_, lmHead := s.Tensor("lm_head.weight")
			_, qBias := s.Tensor("model.layers.0.self_attn.q_proj.bias")
			t.Logf("  lm_head.weight present: %v; q_proj.bias present: %v", lmHead, qBias)
			assert.Equal(t, tc.qBias, qBias)

			embed, _ := s.Tensor("model.embed_tokens.weight")
			assert.Equal(t, tc.embed, embed.Shape)
			_, ok := s.Tensor("model.layers." + strconv.Itoa(tc.layers-1) + ".mlp.down_proj.weight")
			assert.True(t, ok, "last layer")
			for _, name := range s.Names() {
				tensor, _ := s.Tensor(name)
				assert.Equal(t, tc.dtype, tensor.DType, name)
				assert.Equal(t, tensor.Elements()*int64(tensor.DType.BlockBytes()), int64(len(tensor.Data)), name)
			}
		})
	}
}
