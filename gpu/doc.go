// Package gpu is the CUDA backend: it runs the operations of package backend — and so
// the Llama-family forward pass of model/llama, written once — on an NVIDIA GPU, with
// the weights, the activations and the paged key/value blocks in device memory,
// without cgo. A model is given it at load:
//
//	dev, err := gpu.OpenDevice(gpu.DeviceOptions{})
//	…
//	m, err := llama.Open(path, gpu.Factory(dev, gpu.BackendOptions{}), llama.Options{})
//
// (or specula.Config{Backend: gpu.Factory(dev, …)}); the key/value books are
// kvcache's, the storage is the device's. Nothing else in the module imports this
// package, so only a program that does carries the CUDA loader.
//
// libcuda, cuBLAS and NVRTC are opened at run time with purego, so the package builds
// with CGO_ENABLED=0 and costs nothing where there is no GPU: [Available] says why a GPU
// cannot be used, and [OpenDevice] fails with the same message. The small kernels
// (RMSNorm, rotary embeddings, attention over paged blocks, SiLU·mul, Q8_0 products)
// are compiled by NVRTC for the device when it is opened; F16 and BF16 products of
// prompts go to cuBLAS. Libraries are searched for in the directories named by
// $SPECULA_CUDA_LIB_PATH, then the toolkit, loader and Python-wheel locations (see
// [EnvLibPath]). The supported weight types are F32, F16, BF16 and Q8_0. Linux is the
// supported system. The package builds everywhere: on Windows [Available] says it is
// not supported there, and on macOS, which has no CUDA driver, that libcuda is not
// found.
//
// The package has three layers: [Device], an opened GPU (or the host reference
// device) that serialises work on it; the device operations (deviceOps: memory,
// copies, kernel launches), run by cudaOps on a GPU and defined in plain Go by
// hostOps; and [Backend], the operations of package backend built from them for one
// model shape. [HostDevice] runs the same device operations in plain Go on the CPU:
// it defines what each CUDA kernel must compute, the tests check the CUDA kernels
// against it on a GPU, and models run on it (slowly) without one.
package gpu
