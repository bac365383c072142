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

// DotPackedRows computes out[t·ldo + j] = k[j] · x[t] for the cnt keys k[j] =
// k[j·hd : (j+1)·hd] (hd a multiple of 8) and the n rows (1 to Group) of x packed by
// PackRows: DotPacked for each key, bit for bit, with several keys to a kernel call
// where the multi-row kernels allow. Attention uses it to score a block of cached keys.
func DotPackedRows(k []float32, cnt, hd int, x []float32, n int, out []float32, ldo int) {
	if cnt == 0 {
		return
	}
	_ = k[cnt*hd-1]
	_ = out[(n-1)*ldo+cnt-1]
	kb := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(k))), 4*cnt*hd)
	j := 0
	if R, multi := rowsFor(n), multiF32[n]; R > 1 && multi != nil {
		for ; j+R <= cnt; j += R {
			multi(kb[4*j*hd:], 4*hd, x, hd/8, out[j:], ldo)
		}
	}
	for ; j < cnt; j++ {
		dotF32[n](kb[4*j*hd:], x, hd/8, out[j:], ldo)
	}
}

// weightedSumKernel adds a weighted sum of value rows to the outputs of a fixed
// number of heads (see WeightedSum).
type weightedSumKernel func(w []float32, ldw int, v []float32, cnt int, out []float32, hd int)

// WeightedSum adds, for each of heads heads, the weighted sum of cnt value rows to its
// output: out[h·hd+d] += Σ_j w[h·ldw+j] · v[j·hd+d], with j in order and one FMA per
// term — exactly what cnt calls of Axpy would compute, in one call. hd is
// len(out)/heads.
func WeightedSum(w []float32, ldw int, v []float32, cnt int, out []float32, heads int) {
	hd := len(out) / heads
	if hasAVX2 && hd%16 == 0 {
		if cnt == 0 {
			return
		}
		_ = w[(heads-1)*ldw+cnt-1]
		v = v[:cnt*hd]
		for h := 0; h < heads; {
			b := min(4, heads-h)
			weightedSumAVX2[b](w[h*ldw:], ldw, v, cnt, out[h*hd:(h+b)*hd], hd)
			h += b
		}
		return
	}
	for h := range heads {
		o := out[h*hd : (h+1)*hd]
		for j := range cnt {
			Axpy(w[h*ldw+j], v[j*hd:(j+1)*hd], o)
		}
	}
}
