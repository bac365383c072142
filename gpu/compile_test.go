package gpu

import (
	"strings"
	"testing"
)

// TestKernelsCompile builds kernels.cu with NVRTC for Hopper and for Ampere. It needs
// only NVRTC (no GPU, no driver), so it runs wherever the library is found.
func TestKernelsCompile(t *testing.T) {
	nv, err := loadCompiler(hostSearchEnv())
	if err != nil {
		t.Skipf("NVRTC not available: %v", err)
	}
	for _, cc := range []int{90, 80} {
		image, arch, err := nv.build(kernelSource, "specula_kernels.cu", cc)
		if err != nil {
			t.Fatalf("compute capability %d: %v", cc, err)
		}
		t.Logf("NVRTC %s (%s): compute capability %d → %s, %d bytes", nv.versionString(), nv.lib.path, cc, arch, len(image))
		if strings.HasPrefix(arch, "compute_") {
			for _, k := range kernelNames() {
				if !strings.Contains(string(image), ".entry "+k) {
					t.Errorf("PTX for %s lacks kernel %s", arch, k)
				}
			}
		}
	}
}
