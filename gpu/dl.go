package gpu

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// library is an opened shared library.
type library struct {
	path   string
	handle uintptr
}

// openLibrary opens lib from the first of the directories dirs that holds a file that
// loads, else by its names through the dynamic loader's own search (ld.so.cache,
// LD_LIBRARY_PATH at start-up). The error says what was tried and why each failed.
// Libraries stay loaded for the life of the process.
func openLibrary(lib libSpec, dirs []string) (library, error) {
	if err := loaderSupported(); err != nil {
		return library{}, err
	}
	var tried []string
	for _, p := range findLibrary(lib, dirs) {
		for _, c := range companions(p) {
			if _, err := dlopen(c); err == nil {
				break
			}
		}
		h, err := dlopen(p)
		if err == nil {
			return library{path: p, handle: h}, nil
		}
		tried = append(tried, fmt.Sprintf("%s: %v", p, err))
	}
	for _, f := range lib.files {
		h, err := dlopen(f)
		if err == nil {
			return library{path: f, handle: h}, nil
		}
		if !strings.Contains(err.Error(), "No such file") && !strings.Contains(err.Error(), "cannot open") {
			tried = append(tried, fmt.Sprintf("%s: %v", f, err))
		}
	}
	msg := fmt.Sprintf("cuda: %s not found: looked for %s in %d directories", lib.name, strings.Join(lib.files, ", "), len(dirs))
	if len(dirs) > 0 {
		msg += " (" + strings.Join(dirs, ", ") + ")"
	}
	msg += " and on the dynamic loader's path; set " + EnvLibPath + " to the directory that holds it"
	if len(tried) > 0 {
		msg += "; failed to load: " + strings.Join(tried, "; ")
	}
	return library{}, errors.New(msg)
}

// symbols looks up every named symbol of l into its target, and reports all that are
// missing at once.
func (l library) symbols(syms map[string]*uintptr) error {
	var missing []string
	for name, dst := range syms {
		p, err := dlsym(l.handle, name)
		if err != nil || p == 0 {
			missing = append(missing, name)
			continue
		}
		*dst = p
	}
	if len(missing) > 0 {
		return fmt.Errorf("cuda: %s lacks %s", l.path, strings.Join(missing, ", "))
	}
	return nil
}

// optional looks up a symbol that may be absent (0 then).
func (l library) optional(name string) uintptr {
	p, err := dlsym(l.handle, name)
	if err != nil {
		return 0
	}
	return p
}

// call calls the C function fn with integer and pointer arguments and returns its
// int-sized result. fn must not be 0. Pointers converted to uintptr in the call's
// argument list are kept alive and in place for the call.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

// cString returns s as a NUL-terminated byte slice for C.
func cString(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}

// goString copies the NUL-terminated C string at p.
func goString(p uintptr) string {
	if p == 0 {
		return ""
	}
	ptr := *(*unsafe.Pointer)(unsafe.Pointer(&p))
	n := 0
	for *(*byte)(unsafe.Add(ptr, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(ptr), n))
}

// bytesOf views a slice of plain values as bytes.
func bytesOf[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}
