package main

// intKernels writes the int kernels.
func intKernels(f *file) {}
