package gpu

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
)

// DeviceInfo describes an opened device.
type DeviceInfo struct {
	// Kind is "cuda" for a GPU, "host" for the plain-Go reference device.
	Kind string
	// Name is the GPU's name as the driver reports it ("NVIDIA H200").
	Name string
	// ComputeCapability is major·10 + minor (90 for Hopper).
	ComputeCapability int
	// Multiprocessors is the number of streaming multiprocessors.
	Multiprocessors int
	// TotalMemory is the device memory in bytes.
	TotalMemory int64
	// PeakBandwidth is the memory bandwidth in bytes per second the datasheet gives
	// for a known card, else the one computed from the memory clock and bus width the
	// driver reports; 0 when neither is known.
	PeakBandwidth float64
	// DriverVersion is the CUDA version the driver supports, as 1000·major + 10·minor.
	DriverVersion int
	// NVRTCVersion is the runtime compiler's version ("13.0").
	NVRTCVersion string
	// KernelTarget is what the kernels were built for ("sm_90", or "compute_90" for
	// PTX the driver compiled).
	KernelTarget string
	// Libraries are the paths of the shared libraries loaded.
	Libraries []string
}

// String is a one-line summary.
func (i DeviceInfo) String() string {
	if i.Kind != "cuda" {
		return "host reference device (plain Go)"
	}
	return fmt.Sprintf("%s (compute %d.%d, %d SMs, %.1f GiB, peak %.2f TB/s), driver CUDA %d.%d, NVRTC %s, kernels %s",
		i.Name, i.ComputeCapability/10, i.ComputeCapability%10, i.Multiprocessors, float64(i.TotalMemory)/(1<<30),
		i.PeakBandwidth/1e12, i.DriverVersion/1000, i.DriverVersion%1000/10, i.NVRTCVersion, i.KernelTarget)
}

// Device is a GPU opened for the backend (or the host reference device): its libraries,
// context, cuBLAS handle and compiled kernels. It is safe for concurrent use; work on
// one device is serialised. Models loaded on it must be closed before it.
type Device struct {
	mu     sync.Mutex
	ops    deviceOps
	cuda   *cudaOps // nil for the host device
	info   DeviceInfo
	closed bool
}

// DeviceOptions select and tune a GPU.
type DeviceOptions struct {
	// Ordinal is the CUDA device number (0 for the first GPU).
	Ordinal int
	// GEMMRows is the largest batch whose products with F32, F16 and BF16 weights use
	// the backend's own kernels, which are batch-invariant: a token's logits do not
	// depend on the batch around it, so greedy speculative decoding reproduces plain
	// greedy decoding exactly. Larger batches (prompts) use cuBLAS. 0 means 32.
	GEMMRows int
}

// Available reports whether this process can run models on a GPU: libcuda loads and
// initialises and sees a device, and cuBLAS and NVRTC load. The error says what is
// missing and where it was looked for. It creates no context.
func Available() error {
	env := hostSearchEnv()
	drv, err := loadDriver(env)
	if err != nil {
		return err
	}
	if err := drv.init(); err != nil {
		return fmt.Errorf("%w (library %s)", err, drv.lib.path)
	}
	n, err := drv.deviceCount()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("cuda: the CUDA driver (%s) sees no device", drv.lib.path)
	}
	if _, err := loadBLAS(env); err != nil {
		return err
	}
	if _, err := loadCompiler(env); err != nil {
		return err
	}
	return nil
}

// HostDevice returns a reference device that runs the device operations in plain Go
// on the CPU, one thread: slow, but needing no GPU. The tests use it to check the
// Backend against model/llama and the CPU backend; it also shows what the CUDA kernels must compute.
func HostDevice() *Device {
	return &Device{ops: &hostOps{}, info: DeviceInfo{Kind: "host", Name: "host"}}
}

// knownPeak gives the datasheet memory bandwidth, in bytes per second, of cards by a
// word of their name; the first match wins, so a name that contains another comes
// before it.
func knownPeak(name string) float64 {
	for _, k := range []struct {
		word string
		bw   float64
	}{
		{"GH200", 4.0e12}, {"H200", 4.8e12}, {"H100 PCIe", 2.0e12}, {"H100 NVL", 3.9e12}, {"H100", 3.35e12}, {"H800", 3.35e12},
		{"B200", 8.0e12}, {"A100-SXM4-80GB", 2.039e12}, {"A100 80GB", 1.935e12}, {"A100", 1.555e12},
		{"L40S", 0.864e12}, {"L4", 0.3e12}, {"A10G", 0.6e12}, {"RTX 4090", 1.008e12}, {"RTX 3090", 0.936e12},
	} {
		if strings.Contains(name, k.word) {
			return k.bw
		}
	}
	return 0
}

// OpenDevice opens a GPU: it loads libcuda, cuBLAS and NVRTC (see [EnvLibPath] for
// where it looks), retains the device's primary context, creates a cuBLAS handle and
// compiles the kernels for the device with NVRTC.
func OpenDevice(opts DeviceOptions) (_ *Device, err error) {
	env := hostSearchEnv()
	drv, err := loadDriver(env)
	if err != nil {
		return nil, err
	}
	if err := drv.init(); err != nil {
		return nil, fmt.Errorf("%w (library %s)", err, drv.lib.path)
	}
	n, err := drv.deviceCount()
	if err != nil {
		return nil, err
	}
	if opts.Ordinal < 0 || opts.Ordinal >= n {
		return nil, fmt.Errorf("cuda: device %d requested, the driver sees %d", opts.Ordinal, n)
	}
	bl, err := loadBLAS(env)
	if err != nil {
		return nil, err
	}
	nv, err := loadCompiler(env)
	if err != nil {
		return nil, err
	}
	dev, err := drv.device(opts.Ordinal)
	if err != nil {
		return nil, err
	}
	info := DeviceInfo{Kind: "cuda", NVRTCVersion: nv.versionString(),
		Libraries: []string{drv.lib.path, bl.lib.path, nv.lib.path}}
	if info.Name, err = drv.deviceName(dev); err != nil {
		return nil, err
	}
	major, err := drv.attribute(dev, attrComputeMajor)
	if err != nil {
		return nil, err
	}
	minor, err := drv.attribute(dev, attrComputeMinor)
	if err != nil {
		return nil, err
	}
	info.ComputeCapability = 10*major + minor
	info.Multiprocessors, _ = drv.attribute(dev, attrMultiprocessors)
	info.DriverVersion, _ = drv.version()
	if info.TotalMemory, err = drv.totalMem(dev); err != nil {
		return nil, err
	}
	info.PeakBandwidth = knownPeak(info.Name)
	if info.PeakBandwidth == 0 {
		clock, e1 := drv.attribute(dev, attrMemoryClockKHz)
		bus, e2 := drv.attribute(dev, attrBusWidthBits)
		if e1 == nil && e2 == nil {
			info.PeakBandwidth = 2 * float64(clock) * 1e3 * float64(bus) / 8
		}
	}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx, err := drv.primaryCtx(dev)
	if err != nil {
		return nil, err
	}
	b := &cudaOps{drv: drv, blas: bl, ctx: ctx, dev: dev, fns: map[string]uintptr{},
		args: new(kernelArgs), gs: new(gemmScalars), gemmRows: opts.GEMMRows}
	if b.gemmRows <= 0 {
		b.gemmRows = 32
	}
	defer func() {
		if err != nil {
			_ = b.close()
		}
	}()
	if err := drv.setCurrent(ctx); err != nil {
		return nil, err
	}
	image, arch, err := nv.build(kernelSource, "specula_kernels.cu", info.ComputeCapability)
	if err != nil {
		return nil, fmt.Errorf("cuda: compiling the kernels with NVRTC %s (%s): %w", info.NVRTCVersion, nv.lib.path, err)
	}
	info.KernelTarget = arch
	if b.module, err = drv.loadModule(image); err != nil {
		return nil, fmt.Errorf("%w (kernels built for %s by NVRTC %s)", err, arch, info.NVRTCVersion)
	}
	for _, name := range kernelNames() {
		fn, err := drv.function(b.module, name)
		if err != nil {
			return nil, err
		}
		b.fns[name] = fn
	}
	if b.handle, err = bl.newHandle(); err != nil {
		return nil, err
	}
	return &Device{ops: b, cuda: b, info: info}, nil
}

// errDeviceClosed is returned (wrapped) when a closed device is used.
var errDeviceClosed = errors.New("cuda: device is closed")

// do runs f with the device's backend, holding the device and, for a GPU, with its
// context current on a locked OS thread.
func (d *Device) do(f func(b deviceOps) error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errDeviceClosed
	}
	if d.cuda != nil {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := d.cuda.drv.setCurrent(d.cuda.ctx); err != nil {
			return err
		}
	}
	return f(d.ops)
}

// Info describes the device.
func (d *Device) Info() DeviceInfo { return d.info }

// MemoryInfo returns the free and total device memory in bytes (for the host device,
// 0 and 0).
func (d *Device) MemoryInfo() (free, total int64, err error) {
	err = d.do(func(deviceOps) error {
		if d.cuda == nil {
			return nil
		}
		free, total, err = d.cuda.drv.memInfo()
		return err
	})
	return free, total, err
}

// Synchronize waits until the device has finished all work queued so far.
func (d *Device) Synchronize() error {
	return d.do(func(b deviceOps) error { return b.sync() })
}

// Close releases the device: its compiled kernels, cuBLAS handle and context. Models
// loaded on it must be closed first. The libraries stay loaded.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	if d.cuda != nil {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := d.cuda.drv.setCurrent(d.cuda.ctx); err != nil {
			return err
		}
	}
	return d.ops.close()
}
