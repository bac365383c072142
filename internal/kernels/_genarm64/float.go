package main

// floatKernels writes the float kernels.
func floatKernels(f *file) {}
