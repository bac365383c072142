//go:build amd64 && !purego

package vecmath

import (
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/cpu"
)

// TestDispatch: the helpers run the assembly where the CPU has AVX and AVX2, unless
// SPECULA_CPU=generic holds them to the Go twins (the caps of the CPU kernels that
// keep AVX2, avx2 and avx512bw, leave them on it). Each case runs this test binary
// again under its SPECULA_CPU, as the variable is read once, at start.
func TestDispatch(t *testing.T) {
	if !cpu.X86.HasAVX2 || !cpu.X86.HasAVX {
		t.Skip("the CPU lacks AVX or AVX2: the helpers run their Go twins")
	}
	wantAsm := os.Getenv("SPECULA_CPU") != "generic"
	if hasAVX2 != wantAsm || ranAssembly() != wantAsm {
		t.Fatalf("SPECULA_CPU=%q: hasAVX2 %v, assembly ran %v; want %v", os.Getenv("SPECULA_CPU"), hasAVX2, ranAssembly(), wantAsm)
	}
	if os.Getenv("VECMATH_DISPATCH_CHILD") != "" {
		return
	}
	for _, env := range []string{"", "avx2", "avx512bw", "generic"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDispatch$", "-test.count=1")
		cmd.Env = append(os.Environ(), "VECMATH_DISPATCH_CHILD=1", "SPECULA_CPU="+env)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("SPECULA_CPU=%q: %v\n%s", env, err, out)
		}
	}
}
