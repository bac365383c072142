//go:build !linux

package kernels

// weightBytes allocates the storage of a repacked matrix.
func weightBytes(n int, owner *Matrix) []byte { return make([]byte, n) }
