//go:build !windows

package gpu

import "github.com/ebitengine/purego"

// loaderSupported reports whether this system's dynamic loader can open the CUDA
// libraries: it can, where purego has dlopen.
func loaderSupported() error { return nil }

// dlopen opens a shared library by path or name, its symbols resolved now and
// visible to the libraries opened after it.
func dlopen(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

// dlsym looks up a symbol of an opened library.
func dlsym(handle uintptr, name string) (uintptr, error) { return purego.Dlsym(handle, name) }
