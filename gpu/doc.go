// Package gpu runs Llama-family models (the architectures and weight types of
// model/llama: llama and qwen2; F32, F16, BF16 and Q8_0 weights) on an NVIDIA GPU, with
// a device-resident paged key/value cache, without cgo.
//
// libcuda, cuBLAS and NVRTC are opened at run time with purego, so the package builds
// with CGO_ENABLED=0 and costs nothing where there is no GPU: [Available] says why a GPU
// cannot be used, and [OpenDevice] fails with the same message. The small kernels
// (RMSNorm, rotary embeddings, attention over paged blocks, SiLU·mul, Q8_0 products)
// are compiled by NVRTC for the device when it is opened; F16 and BF16 products of
// prompts go to cuBLAS. Libraries are searched for in the directories named by
// $SPECULA_CUDA_LIB_PATH, then the toolkit, loader and Python-wheel locations (see
// [EnvLibPath]).
//
// A [Model] loaded on a [Device] implements [model.Model], and its sequences implement
// [model.Sequence] (truncate, tree forwards, retain) plus [Sequence.Fork] with
// copy-on-write blocks, so spec.Decoder uses it unchanged as target or drafter.
//
// [HostDevice] is a reference device that runs the same operations in plain Go on the
// CPU: the tests check the runner on it against model/llama, and it shows what each
// CUDA kernel must compute.
package gpu
