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
// output: out[h·hd+d] += Σ_j w[h·ldw+j] · v[j·hd+d], with j in order and one fused
// multiply-add per term: the same bits on every machine (goWeightedSum). hd is
// len(out)/heads.
func WeightedSum(w []float32, ldw int, v []float32, cnt int, out []float32, heads int) {
	hd := len(out) / heads
	if hasAVX512 && hd%32 == 0 {
		if cnt == 0 {
			return
		}
		_ = w[(heads-1)*ldw+cnt-1]
		v = v[:cnt*hd]
		for h := 0; h < heads; {
			b := min(8, heads-h)
			weightedSum512[b](&w[h*ldw], ldw, &v[0], cnt, &out[h*hd], hd)
			h += b
		}
		return
	}
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
	goWeightedSum(w, ldw, v, cnt, out, heads)
}

// scoreKernel and weightedKernel are the assembly forms of ScoreBlock (for a fixed
// number of heads) and WeightedSum.
type (
	scoreKernel    func(kT *float32, hd int, q *float32, out *float32, ldo int, cnt int)
	weightedKernel func(w *float32, ldw int, v *float32, cnt int, out *float32, hd int)
)

// ScoreBlock computes attention scores against a block of 16 keys stored
// dimension-major (element d of key j at kT[16·d + j], hd dimensions, as a kvcache pool
// with KeysTransposed holds them): out[h·ldo + j] = q_h · k_j for the g query rows q_h =
// q[h·hd : (h+1)·hd] and the keys j < cnt. Each score is two chains of fused
// multiply-adds, over the even and the odd dimensions in order, then their sum — one
// key per vector lane, so the score of a key is the same bits whatever block, count or
// batch it is computed in, and the same on every machine. hd must be even.
func ScoreBlock(kT []float32, hd int, q []float32, g int, out []float32, ldo, cnt int) {
	if cnt <= 0 || g <= 0 {
		return
	}
	_ = kT[16*hd-1]
	_ = q[g*hd-1]
	_ = out[(g-1)*ldo+cnt-1]
	scoreBlock(kT, hd, q, g, out, ldo, cnt)
}

// goScoreBlock is ScoreBlock in Go: the definition, and the twin of the assembly.
func goScoreBlock(kT []float32, hd int, q []float32, g int, out []float32, ldo, cnt int) {
	for h := range g {
		qh := q[h*hd : (h+1)*hd]
		for j := range cnt {
			var acc [2]float32
			for d, x := range qh {
				acc[d%2] = fma32(x, kT[16*d+j], acc[d%2])
			}
			out[h*ldo+j] = acc[0] + acc[1]
		}
	}
}

// goWeightedSum is WeightedSum in Go, with fused multiply-adds as the assembly has them.
func goWeightedSum(w []float32, ldw int, v []float32, cnt int, out []float32, heads int) {
	hd := len(out) / heads
	for h := range heads {
		o := out[h*hd : (h+1)*hd]
		for j := range cnt {
			a := w[h*ldw+j]
			for d, x := range v[j*hd : (j+1)*hd] {
				o[d] = fma32(a, x, o[d])
			}
		}
	}
}
