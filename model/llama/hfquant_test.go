package llama

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/internal/sharedtest"
)

// TestGoldenQuantized checks the quantized checkpoints of gocoder-m and gocoder-s
// (AWQ, GPTQ v1 act-order, compressed-tensors W4A16, GPTQ v2 8-bit, FP8 blocks)
// against the known answers a float64 reference computed from the same files.
func TestGoldenQuantized(t *testing.T) {
	for _, name := range []string{"gocoder-m-awq", "gocoder-m-gptq", "gocoder-m-w4a16", "gocoder-s-gptq8", "gocoder-s-fp8"} {
		t.Run(name, func(t *testing.T) {
			cases := loadGolden(t, name)
			m, err := Open(sharedtest.Path(t, "models", name), Options{Backend: cpu.Factory(2)})
			require.NoError(t, err)
			defer m.Close()
			for _, c := range cases {
				worst := checkGolden(t, m, c, 1e-3, true)
				t.Logf("%s: worst logit error %.2g", c.File, worst)
			}
		})
	}
}
