// Package gpu is the CUDA backend: it runs the operations of package backend — and so
// the Llama-family forward pass of model/llama, written once — on an NVIDIA GPU, with
// the weights, the activations and the paged key/value blocks in device memory,
// without cgo. A model goes onto a GPU with llama.Open(path, llama.Options{Device:
// dev}); the key/value books are kvcache's, the storage is the device's.
//
// libcuda, cuBLAS and NVRTC are opened at run time with purego, so the package builds
// with CGO_ENABLED=0 and costs nothing where there is no GPU: [Available] says why a GPU
// cannot be used, and [OpenDevice] fails with the same message. The small kernels
// (RMSNorm, rotary embeddings, attention over paged blocks, SiLU·mul, Q8_0 products)
// are compiled by NVRTC for the device when it is opened; F16 and BF16 products of
// prompts go to cuBLAS. Libraries are searched for in the directories named by
// $SPECULA_CUDA_LIB_PATH, then the toolkit, loader and Python-wheel locations (see
// [EnvLibPath]). The supported weight types are F32, F16, BF16 and Q8_0.
//
// [HostDevice] is a reference device that runs the same device operations in plain Go
// on the CPU: it defines what each CUDA kernel must compute, the tests check the CUDA
// kernels against it on a GPU, and models run on it (slowly) without one.
package gpu
