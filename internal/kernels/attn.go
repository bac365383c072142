package kernels

import "unsafe"

// PackRows lays out n rows of cols values (cols a multiple of 8, n at most Group) from
// src, row-major, in the interleaved form the product kernels read: for each 8
// columns, the rows' 8 values side by side. dst must hold n·cols values.
func PackRows(dst, src []float32, n, cols int) {
	for c := 0; c < cols/8; c++ {
		for t := range n {
			copy(dst[(c*n+t)*8:(c*n+t+1)*8], src[t*cols+c*8:])
		}
	}
}

// DotPacked computes out[t·ldo] = w · x[t] for the n rows (1 to Group) of x packed by
// PackRows, over len(w) columns (a multiple of 8): one read of w serves every row.
// Attention uses it to score one cached key against the query heads that share it.
func DotPacked(w, x []float32, n int, out []float32, ldo int) {
	wb := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), 4*len(w))
	dotF32[n](wb, x, len(w)/8, out, ldo)
}
