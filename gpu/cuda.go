package gpu

import (
	"fmt"
	"unsafe"
)

// driver holds the CUDA driver API entry points the backend uses, from libcuda.
type driver struct {
	lib library

	cuInit, cuDriverGetVersion, cuDeviceGetCount, cuDeviceGet, cuDeviceGetName uintptr
	cuDeviceGetAttribute, cuDeviceTotalMem, cuDevicePrimaryCtxRetain           uintptr
	cuDevicePrimaryCtxRelease, cuCtxSetCurrent, cuCtxSynchronize               uintptr
	cuMemAlloc, cuMemFree, cuMemcpyHtoD, cuMemcpyDtoH, cuMemGetInfo            uintptr
	cuModuleLoadData, cuModuleUnload, cuModuleGetFunction, cuLaunchKernel      uintptr
	cuGetErrorName, cuGetErrorString                                           uintptr
}

// Device attributes (CUdevice_attribute).
const (
	attrMultiprocessors = 16
	attrMemoryClockKHz  = 36
	attrBusWidthBits    = 37
	attrComputeMajor    = 75
	attrComputeMinor    = 76
)

// loadDriver opens libcuda and looks up its functions.
func loadDriver(env searchEnv) (*driver, error) {
	lib, err := openLibrary(specCUDA(), searchDirs(env, specCUDA()))
	if err != nil {
		return nil, err
	}
	d := &driver{lib: lib}
	// The names are those cuda.h maps the API to (the _v2 forms where it does).
	err = lib.symbols(map[string]*uintptr{
		"cuInit":                       &d.cuInit,
		"cuDriverGetVersion":           &d.cuDriverGetVersion,
		"cuDeviceGetCount":             &d.cuDeviceGetCount,
		"cuDeviceGet":                  &d.cuDeviceGet,
		"cuDeviceGetName":              &d.cuDeviceGetName,
		"cuDeviceGetAttribute":         &d.cuDeviceGetAttribute,
		"cuDeviceTotalMem_v2":          &d.cuDeviceTotalMem,
		"cuDevicePrimaryCtxRetain":     &d.cuDevicePrimaryCtxRetain,
		"cuDevicePrimaryCtxRelease_v2": &d.cuDevicePrimaryCtxRelease,
		"cuCtxSetCurrent":              &d.cuCtxSetCurrent,
		"cuCtxSynchronize":             &d.cuCtxSynchronize,
		"cuMemAlloc_v2":                &d.cuMemAlloc,
		"cuMemFree_v2":                 &d.cuMemFree,
		"cuMemcpyHtoD_v2":              &d.cuMemcpyHtoD,
		"cuMemcpyDtoH_v2":              &d.cuMemcpyDtoH,
		"cuMemGetInfo_v2":              &d.cuMemGetInfo,
		"cuModuleLoadData":             &d.cuModuleLoadData,
		"cuModuleUnload":               &d.cuModuleUnload,
		"cuModuleGetFunction":          &d.cuModuleGetFunction,
		"cuLaunchKernel":               &d.cuLaunchKernel,
		"cuGetErrorName":               &d.cuGetErrorName,
		"cuGetErrorString":             &d.cuGetErrorString,
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// check turns a CUresult into an error naming the call.
func (d *driver) check(what string, r uintptr) error {
	code := uint32(r)
	if code == 0 {
		return nil
	}
	var name, desc uintptr
	call(d.cuGetErrorName, uintptr(code), uintptr(unsafe.Pointer(&name)))
	call(d.cuGetErrorString, uintptr(code), uintptr(unsafe.Pointer(&desc)))
	n, s := goString(name), goString(desc)
	if n == "" {
		n = fmt.Sprintf("CUresult %d", code)
	}
	if s != "" {
		return fmt.Errorf("cuda: %s: %s (%s)", what, n, s)
	}
	return fmt.Errorf("cuda: %s: %s", what, n)
}

func (d *driver) init() error { return d.check("cuInit", call(d.cuInit, 0)) }

func (d *driver) version() (int, error) {
	var v int32
	err := d.check("cuDriverGetVersion", call(d.cuDriverGetVersion, uintptr(unsafe.Pointer(&v))))
	return int(v), err
}

func (d *driver) deviceCount() (int, error) {
	var n int32
	err := d.check("cuDeviceGetCount", call(d.cuDeviceGetCount, uintptr(unsafe.Pointer(&n))))
	return int(n), err
}

func (d *driver) device(ordinal int) (int32, error) {
	var dev int32
	err := d.check(fmt.Sprintf("cuDeviceGet(%d)", ordinal), call(d.cuDeviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(ordinal)))
	return dev, err
}

func (d *driver) deviceName(dev int32) (string, error) {
	buf := make([]byte, 256)
	if err := d.check("cuDeviceGetName", call(d.cuDeviceGetName, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(dev))); err != nil {
		return "", err
	}
	for i, c := range buf {
		if c == 0 {
			return string(buf[:i]), nil
		}
	}
	return string(buf), nil
}

func (d *driver) attribute(dev int32, attr int) (int, error) {
	var v int32
	err := d.check(fmt.Sprintf("cuDeviceGetAttribute(%d)", attr), call(d.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(attr), uintptr(dev)))
	return int(v), err
}

func (d *driver) totalMem(dev int32) (int64, error) {
	var n uint64
	err := d.check("cuDeviceTotalMem", call(d.cuDeviceTotalMem, uintptr(unsafe.Pointer(&n)), uintptr(dev)))
	return int64(n), err
}

func (d *driver) primaryCtx(dev int32) (uintptr, error) {
	var ctx uintptr
	err := d.check("cuDevicePrimaryCtxRetain", call(d.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&ctx)), uintptr(dev)))
	return ctx, err
}

func (d *driver) releaseCtx(dev int32) error {
	return d.check("cuDevicePrimaryCtxRelease", call(d.cuDevicePrimaryCtxRelease, uintptr(dev)))
}

func (d *driver) setCurrent(ctx uintptr) error {
	return d.check("cuCtxSetCurrent", call(d.cuCtxSetCurrent, ctx))
}

func (d *driver) synchronize() error {
	return d.check("cuCtxSynchronize", call(d.cuCtxSynchronize))
}

func (d *driver) memInfo() (free, total int64, err error) {
	var f, t uint64
	err = d.check("cuMemGetInfo", call(d.cuMemGetInfo, uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&t))))
	return int64(f), int64(t), err
}

func (d *driver) alloc(bytes int64) (uint64, error) {
	var p uint64
	err := d.check(fmt.Sprintf("cuMemAlloc(%d bytes)", bytes), call(d.cuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(bytes)))
	return p, err
}

func (d *driver) free(p uint64) error {
	return d.check("cuMemFree", call(d.cuMemFree, uintptr(p)))
}

func (d *driver) htod(dst uint64, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return d.check("cuMemcpyHtoD", call(d.cuMemcpyHtoD, uintptr(dst), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src))))
}

func (d *driver) dtoh(dst []byte, src uint64) error {
	if len(dst) == 0 {
		return nil
	}
	return d.check("cuMemcpyDtoH", call(d.cuMemcpyDtoH, uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst))))
}

func (d *driver) loadModule(image []byte) (uintptr, error) {
	var mod uintptr
	err := d.check("cuModuleLoadData", call(d.cuModuleLoadData, uintptr(unsafe.Pointer(&mod)), uintptr(unsafe.Pointer(&image[0]))))
	return mod, err
}

func (d *driver) unloadModule(mod uintptr) error {
	return d.check("cuModuleUnload", call(d.cuModuleUnload, mod))
}

func (d *driver) function(mod uintptr, name string) (uintptr, error) {
	var fn uintptr
	cname := cString(name)
	err := d.check("cuModuleGetFunction("+name+")", call(d.cuModuleGetFunction, uintptr(unsafe.Pointer(&fn)), mod, uintptr(unsafe.Pointer(&cname[0]))))
	return fn, err
}

// kernelArgs is the parameter block of one launch: the values, and the array of
// pointers to them that cuLaunchKernel reads. It lives on the heap for the life of its
// backend, so the addresses handed to the driver stay valid.
type kernelArgs struct {
	vals [24]uint64
	ptrs [24]uintptr
	n    int
}

func (a *kernelArgs) reset() { a.n = 0 }

func (a *kernelArgs) ptr(p devptr) *kernelArgs { return a.u64(uint64(p)) }

func (a *kernelArgs) u64(v uint64) *kernelArgs {
	a.vals[a.n] = v
	a.ptrs[a.n] = uintptr(unsafe.Pointer(&a.vals[a.n]))
	a.n++
	return a
}

func (a *kernelArgs) i32(v int) *kernelArgs { return a.u64(uint64(uint32(int32(v)))) }

func (a *kernelArgs) i64(v int64) *kernelArgs { return a.u64(uint64(v)) }

func (a *kernelArgs) f32(v float32) *kernelArgs {
	return a.u64(uint64(*(*uint32)(unsafe.Pointer(&v))))
}

// launch runs fn on the default stream with the arguments in a.
func (d *driver) launch(name string, fn uintptr, grid, block [3]int, shared int, a *kernelArgs) error {
	r := call(d.cuLaunchKernel, fn,
		uintptr(grid[0]), uintptr(grid[1]), uintptr(grid[2]),
		uintptr(block[0]), uintptr(block[1]), uintptr(block[2]),
		uintptr(shared), 0, uintptr(unsafe.Pointer(&a.ptrs[0])), 0)
	return d.check("launching "+name, r)
}
