package gpu

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The model-level checks — models on the host device against the CPU backend, on a
// GPU against both, the paged key/value cache, random-weight models, speculative
// decoding — are in model/llama (device_*_test.go), whose tests pass this package's
// Backend to the model. The tests here check this package's own parts: library
// discovery, the kernels, the host device's operations and the Backend (backend.go,
// pass.go) driven by hand-built plans.

// gpuTol bounds the difference between a GPU's logits and the host device's.
// Decoding and drafts (batches of up to 32 tokens) run in float32 with fused
// multiply-adds; passes of more than 32 rows go to cuBLAS with activations rounded to
// the weights' type (F16 or BF16), which costs most of the budget.
const gpuTol = 0.1

// The GPU opened once for all GPU tests, closed by TestMain.
var (
	gpuOnce sync.Once
	gpuDev  *Device
	gpuErr  error
)

// TestMain closes the shared GPU after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if gpuDev != nil {
		if err := gpuDev.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "closing the GPU:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// openGPU returns the shared GPU, skipping the test with Available's message where
// there is none.
func openGPU(t *testing.T) *Device {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	gpuOnce.Do(func() {
		gpuDev, gpuErr = OpenDevice(DeviceOptions{})
		if gpuErr == nil {
			fmt.Fprintln(os.Stderr, "GPU:", gpuDev.Info())
		}
	})
	require.NoError(t, gpuErr, "OpenDevice after Available succeeded")
	return gpuDev
}

// TestGPUInfo opens the GPU and checks what it reports.
func TestGPUInfo(t *testing.T) {
	dev := openGPU(t)
	info := dev.Info()
	t.Logf("%s", info)
	t.Logf("libraries: %v", info.Libraries)
	assert.Equal(t, "cuda", info.Kind)
	assert.NotEmpty(t, info.Name)
	assert.Greater(t, info.ComputeCapability, 0)
	assert.Greater(t, info.PeakBandwidth, 0.0)
	assert.NotEmpty(t, info.KernelTarget)
	free, total, err := dev.MemoryInfo()
	require.NoError(t, err)
	t.Logf("memory: %.1f GiB free of %.1f GiB", float64(free)/(1<<30), float64(total)/(1<<30))
	assert.Greater(t, total, int64(0))
	require.NoError(t, dev.Synchronize())
}

// TestGPUKernelsCompileOnDevice checks the kernels NVRTC built for the device: every
// kernel the backend launches was found in the module.
func TestGPUKernelsCompileOnDevice(t *testing.T) {
	dev := openGPU(t)
	for _, k := range kernelNames() {
		assert.NotZero(t, dev.cuda.fns[k], k)
	}
}

// TestHostDevice checks what the host device reports, and that a closed one refuses
// work.
func TestHostDevice(t *testing.T) {
	dev := HostDevice()
	info := dev.Info()
	assert.Equal(t, "host", info.Kind)
	assert.Equal(t, "host reference device (plain Go)", info.String())
	free, total, err := dev.MemoryInfo()
	require.NoError(t, err)
	assert.Zero(t, free)
	assert.Zero(t, total)
	require.NoError(t, dev.Synchronize())
	require.NoError(t, dev.Close())
	require.NoError(t, dev.Close(), "closing twice is harmless")
	assert.ErrorIs(t, dev.Synchronize(), errDeviceClosed)
	_, _, err = dev.MemoryInfo()
	assert.ErrorIs(t, err, errDeviceClosed)
}
