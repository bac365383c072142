package gpu

import "errors"

// errWindows is the error of every attempt to load the CUDA libraries on Windows. The
// package builds there, so that programs importing it build for every system, but it
// finds libraries by their Linux names and places (libcuda.so.1 and the toolkit's
// lib64 directories), not as nvcuda.dll, cublas64_*.dll and nvrtc64_*.dll under
// %CUDA_PATH%, and it has never run on Windows: rather than guess, it says so.
var errWindows = errors.New("cuda: the CUDA backend is not supported on Windows (it loads libcuda, cuBLAS and NVRTC as Linux installs them); run the model on the CPU backend")

// loaderSupported reports that the CUDA libraries cannot be loaded on Windows.
func loaderSupported() error { return errWindows }

// dlopen fails on Windows (see errWindows).
func dlopen(string) (uintptr, error) { return 0, errWindows }

// dlsym fails on Windows (see errWindows).
func dlsym(uintptr, string) (uintptr, error) { return 0, errWindows }
