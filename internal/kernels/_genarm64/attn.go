package main

// attnKernels writes the attn kernels.
func attnKernels(f *file) {}
