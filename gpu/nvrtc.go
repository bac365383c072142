package gpu

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"unsafe"
)

// compiler holds the NVRTC entry points used to build the kernels at run time.
type compiler struct {
	lib                                     library
	version, create, compile, destroy       uintptr
	logSize, log, ptxSize, ptx, errorString uintptr
	cubinSize, cubin, numArchs, archs       uintptr // optional (NVRTC 11.1+ / 11.2+)
}

func loadCompiler(env searchEnv) (*compiler, error) {
	lib, err := openLibrary(specNVRTC(), searchDirs(env, specNVRTC()))
	if err != nil {
		return nil, err
	}
	c := &compiler{lib: lib}
	if err := lib.symbols(map[string]*uintptr{
		"nvrtcVersion":           &c.version,
		"nvrtcCreateProgram":     &c.create,
		"nvrtcCompileProgram":    &c.compile,
		"nvrtcDestroyProgram":    &c.destroy,
		"nvrtcGetProgramLogSize": &c.logSize,
		"nvrtcGetProgramLog":     &c.log,
		"nvrtcGetPTXSize":        &c.ptxSize,
		"nvrtcGetPTX":            &c.ptx,
		"nvrtcGetErrorString":    &c.errorString,
	}); err != nil {
		return nil, err
	}
	c.cubinSize = lib.optional("nvrtcGetCUBINSize")
	c.cubin = lib.optional("nvrtcGetCUBIN")
	c.numArchs = lib.optional("nvrtcGetNumSupportedArchs")
	c.archs = lib.optional("nvrtcGetSupportedArchs")
	return c, nil
}

func (c *compiler) check(what string, r uintptr) error {
	code := uint32(r)
	if code == 0 {
		return nil
	}
	return fmt.Errorf("cuda: %s: %s", what, goString(call(c.errorString, uintptr(code))))
}

// versionString is NVRTC's version as "major.minor".
func (c *compiler) versionString() string {
	var major, minor int32
	if c.check("nvrtcVersion", call(c.version, uintptr(unsafe.Pointer(&major)), uintptr(unsafe.Pointer(&minor)))) != nil {
		return "unknown"
	}
	return fmt.Sprintf("%d.%d", major, minor)
}

// supportedArchs lists the compute capabilities (as 10·major + minor) NVRTC can build
// for, or nil when it cannot say.
func (c *compiler) supportedArchs() []int {
	if c.numArchs == 0 || c.archs == 0 {
		return nil
	}
	var n int32
	if c.check("nvrtcGetNumSupportedArchs", call(c.numArchs, uintptr(unsafe.Pointer(&n)))) != nil || n <= 0 || n > 1024 {
		return nil
	}
	archs := make([]int32, n)
	if c.check("nvrtcGetSupportedArchs", call(c.archs, uintptr(unsafe.Pointer(&archs[0])))) != nil {
		return nil
	}
	out := make([]int, n)
	for i, a := range archs {
		out[i] = int(a)
	}
	slices.Sort(out)
	return out
}

// target picks what to build for a device of compute capability cc (10·major + minor):
// machine code for the device itself when NVRTC knows it, else PTX for the newest
// architecture NVRTC knows below it, which the driver compiles when it loads.
func (c *compiler) target(cc int) (arch string, cubin bool) {
	archs := c.supportedArchs()
	if archs == nil {
		return fmt.Sprintf("compute_%d", cc), false
	}
	if slices.Contains(archs, cc) && c.cubin != 0 && c.cubinSize != 0 {
		return fmt.Sprintf("sm_%d", cc), true
	}
	best := archs[0]
	for _, a := range archs {
		if a <= cc {
			best = a
		}
	}
	return fmt.Sprintf("compute_%d", best), false
}

// build compiles CUDA C source for a device of compute capability cc and returns the
// image (CUBIN or PTX) for cuModuleLoadData. A compilation error carries NVRTC's log.
func (c *compiler) build(src, name string, cc int, extra ...string) (image []byte, arch string, err error) {
	arch, cubin := c.target(cc)
	opts := append([]string{"--gpu-architecture=" + arch, "--fmad=false"}, extra...)
	csrc, cname := cString(src), cString(name)
	var prog uintptr
	if err := c.check("nvrtcCreateProgram", call(c.create, uintptr(unsafe.Pointer(&prog)),
		uintptr(unsafe.Pointer(&csrc[0])), uintptr(unsafe.Pointer(&cname[0])), 0, 0, 0)); err != nil {
		return nil, arch, err
	}
	defer func() { call(c.destroy, uintptr(unsafe.Pointer(&prog))) }()
	cstrs := make([][]byte, len(opts))
	ptrs := make([]uintptr, len(opts))
	for i, o := range opts {
		cstrs[i] = cString(o)
		ptrs[i] = uintptr(unsafe.Pointer(&cstrs[i][0]))
	}
	r := call(c.compile, prog, uintptr(len(opts)), uintptr(unsafe.Pointer(&ptrs[0])))
	runtime.KeepAlive(cstrs)
	if err := c.check("nvrtcCompileProgram("+strings.Join(opts, " ")+")", r); err != nil {
		return nil, arch, fmt.Errorf("%w\n%s", err, c.programLog(prog))
	}
	sizeFn, getFn, what := c.ptxSize, c.ptx, "PTX"
	if cubin {
		sizeFn, getFn, what = c.cubinSize, c.cubin, "CUBIN"
	}
	var size uint64
	if err := c.check("nvrtcGet"+what+"Size", call(sizeFn, prog, uintptr(unsafe.Pointer(&size)))); err != nil {
		return nil, arch, err
	}
	if size == 0 || size > 1<<30 {
		return nil, arch, fmt.Errorf("cuda: NVRTC returned %d bytes of %s", size, what)
	}
	image = make([]byte, size+1) // PTX is NUL-terminated; the spare byte keeps it so
	if err := c.check("nvrtcGet"+what, call(getFn, prog, uintptr(unsafe.Pointer(&image[0])))); err != nil {
		return nil, arch, err
	}
	return image, arch, nil
}

func (c *compiler) programLog(prog uintptr) string {
	var size uint64
	if c.check("nvrtcGetProgramLogSize", call(c.logSize, prog, uintptr(unsafe.Pointer(&size)))) != nil || size == 0 || size > 1<<24 {
		return ""
	}
	buf := make([]byte, size)
	if c.check("nvrtcGetProgramLog", call(c.log, prog, uintptr(unsafe.Pointer(&buf[0])))) != nil {
		return ""
	}
	return strings.TrimRight(string(buf), "\x00\n")
}
