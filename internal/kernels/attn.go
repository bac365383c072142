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

// WeightedSum adds, for each of heads heads, the weighted sum of cnt value rows to its
// output: out[h·hd+d] += Σ_j w[h·ldw+j] · v[j·hd+d], with j in order and one FMA per
// term — exactly what cnt calls of Axpy would compute, in one call. hd is
// len(out)/heads.
func WeightedSum(w []float32, ldw int, v []float32, cnt int, out []float32, heads int) {
	hd := len(out) / heads
	if hasAVX2 && hd%16 == 0 {
		weightedSumAVX2(w, ldw, v[:cnt*hd], cnt, out, heads, hd)
		return
	}
	for h := range heads {
		o := out[h*hd : (h+1)*hd]
		for j := range cnt {
			Axpy(w[h*ldw+j], v[j*hd:(j+1)*hd], o)
		}
	}
}
