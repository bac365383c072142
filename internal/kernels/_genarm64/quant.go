package main

// quantKernels writes the quant kernels.
func quantKernels(f *file) {}
