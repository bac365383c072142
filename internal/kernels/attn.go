package kernels

// WeightedSum adds, for each of heads heads, the weighted sum of cnt value rows to its
// output: out[h·hd+d] += Σ_j w[h·ldw+j] · v[j·hd+d], with j in order and one fused
// multiply-add per term: the same bits on every machine (goWeightedSum). hd is
// len(out)/heads.
func WeightedSum(w []float32, ldw int, v []float32, cnt int, out []float32, heads int) {
	hd := len(out) / heads
	if cnt == 0 {
		return
	}
	_ = w[(heads-1)*ldw+cnt-1]
	weightedSum(w, ldw, v[:cnt*hd], cnt, out, heads, hd)
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
				// fma32, its fast path inlined.
				k, a := kT[16*d+j], acc[d%2]
				s := float64(x)*float64(k) + float64(a)
				if !safeToRound(s) {
					s = float64(fma32Slow(x, k, a))
				}
				acc[d%2] = float32(s)
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
				// fma32, its fast path inlined.
				s := float64(a)*float64(x) + float64(o[d])
				if !safeToRound(s) {
					s = float64(fma32Slow(a, x, o[d]))
				}
				o[d] = float32(s)
			}
		}
	}
}
