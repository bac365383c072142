package main

// The int8 matrix multiply kernels (ARMv8.6 i8mm) of the 32-value types, for pairs of
// activation rows. SMMLA adds to the four int32 lanes of its destination the 2×2
// matrix of dot products of two rows of 8 signed bytes with two others: weights
// [w0, w1] against activations [xt, xu] give [w0·xt, w0·xu, w1·xt, w1·xu]. A quarter's
// vectors of two consecutive 4-code steps, zipped by 32-bit lanes, are its rows 0–1
// and 2–3 with 8 consecutive codes each; the activation rows t and u, zipped by
// 64-bit lanes, are the same 8 values of the two rows. So one SMMLA takes 2 weight
// rows × 2 activation rows × 8 values, the work of two SDOTs, and the pair's sums
// come apart by UZP1/UZP2 at the end of the quarter into one vector per activation
// row, the four weight rows' sums in order, as the dot-product kernels hold them.
// Integer sums are exact in any order; the float finish is finish32's, the twin's.
// An odd last row is paired with itself and its second half of the results dropped.

// levelI8MM is the i8mm family. Its dot flag makes k.sum take the accumulators as
// they are (one int32 per weight row); its one-row kernel is the Dot one. Only
// block32 has an i8mm form: a type whose block has none would, at this level, be
// written with its dot-product body under the I8MM name.
var levelI8MM = level{"I8MM", true}

// mmPairs are the activation rows taken together by SMMLA: (0, 1), (2, 3)…, an odd
// last row paired with itself.
func mmPairs(n int) [][2]int {
	var ps [][2]int
	for t := 0; t < n; t += 2 {
		ps = append(ps, [2]int{t, min(t+1, n-1)})
	}
	return ps
}

// mmActs loads the activation codes of the block for each pair (t, u) of rows as
// four vectors, j = 0…3: values 8j…8j+7 of row t, then of row u (SMMLA's two rows).
func mmActs(k *intFrame) [][4]V {
	var xs [][4]V
	for _, p := range mmPairs(k.n) {
		var a, b [2]V
		for h := range 2 {
			a[h] = k.p.get()
			k.g.op("FMOVQ %d(%s), F%d", 16*h, xReg(p[0]), a[h])
			b[h] = a[h]
			if p[1] != p[0] {
				b[h] = k.p.get()
				k.g.op("FMOVQ %d(%s), F%d", 16*h, xReg(p[1]), b[h])
			}
		}
		var x [4]V
		for h := range 2 {
			x[2*h], x[2*h+1] = zipPair(k, "2d", a[h], b[h])
		}
		xs = append(xs, x)
	}
	return xs
}

// zipPair returns ZIP1 and ZIP2 of a and b (lanes of arrangement ar) in new
// registers, and frees a and b. Of a quarter's steps s and s+1 (4s): rows 0–1 and
// rows 2–3 with 8 codes each; of two activation vectors (2d): their low 8 values
// side by side, and their high ones.
func zipPair(k *intFrame, ar arr, a, b V) (lo, hi V) {
	lo, hi = k.p.get(), k.p.get()
	k.g.i(zip1(ar, lo, a, b))
	k.g.i(zip2(ar, hi, a, b))
	k.p.put(a)
	if b != a {
		k.p.put(b)
	}
	return lo, hi
}

// block32MM is block32 for the i8mm level: the same block, its codes taken 8 at a
// time by SMMLA.
func block32MM(k *intFrame, codes, masks, mins, zeros, off int, q8 bool) {
	xs := mmActs(k)
	low4, fb := nibbleConsts(k, q8, masks)
	for q := range 4 {
		fb.quarter(k, q)
		acc := mmZero(k, len(xs))
		// mma adds the products of the 8 values 8j…8j+7 of weight rows 0–1 (w01) and
		// 2–3 (w23) with those of every pair of activation rows, and frees w01, w23.
		mma := func(j int, w01, w23 V) {
			for i := range xs {
				k.g.i(smmla(acc[i][0], w01, xs[i][j]))
				k.g.i(smmla(acc[i][1], w23, xs[i][j]))
			}
			k.p.put(w01, w23)
		}
		switch {
		case q8:
			for j := range 4 {
				a, b := k.load(codes+128*j+16*q), k.load(codes+128*j+64+16*q)
				w01, w23 := zipPair(k, "4s", a, b)
				mma(j, w01, w23)
			}
		case masks < 0:
			// Zipped first, then unpacked: the nibbles of steps 2h, 2h+1 of rows 0–1
			// and 2–3, low (values 8h…) and high (16+8h…).
			for h := range 2 {
				a, b := k.load(codes+128*h+16*q), k.load(codes+128*h+64+16*q)
				r01, r23 := zipPair(k, "4s", a, b)
				lo01, lo23 := k.p.get(), k.p.get()
				for _, r := range [][2]V{{lo01, r01}, {lo23, r23}} {
					k.g.i(and(r[0], r[1], low4))
					k.g.i(ushr("16b", r[1], r[1], 4))
				}
				mma(h, lo01, lo23)
				mma(2+h, r01, r23)
			}
		default:
			// The fifth bits go by the repacked lanes: unpacked, then zipped.
			for h := range 2 {
				lo0, hi0 := nibbleStep(k, fb, codes, masks, q, 2*h, low4)
				lo1, hi1 := nibbleStep(k, fb, codes, masks, q, 2*h+1, low4)
				w01, w23 := zipPair(k, "4s", lo0, lo1)
				mma(h, w01, w23)
				w01, w23 = zipPair(k, "4s", hi0, hi1)
				mma(2+h, w01, w23)
			}
		}
		finish32(k, q, mmSums(k, acc), mins, zeros, off)
	}
	k.p.put(low4)
	fb.release(k)
	for _, x := range xs {
		k.p.put(x[:]...)
	}
}

// mmZero returns zeroed accumulators for each of pairs pairs of activation rows: of
// weight rows 0–1 and of 2–3.
func mmZero(k *intFrame, pairs int) [][2]V {
	acc := make([][2]V, pairs)
	for i := range acc {
		for h := range 2 {
			acc[i][h] = k.p.get()
			k.g.i(eor(acc[i][h], acc[i][h], acc[i][h]))
		}
	}
	return acc
}

// mmSums parts the SMMLA sums ([r0·xt, r0·xu, r1·xt, r1·xu] and the same of rows 2–3)
// into one accumulator per activation row, the four weight rows' sums in order: the
// even lanes of the two (UZP1) are row t's, the odd ones (UZP2) row u's.
func mmSums(k *intFrame, acc [][2]V) [intRows]iacc {
	var s [intRows]iacc
	for i, p := range mmPairs(k.n) {
		a01, a23 := acc[i][0], acc[i][1]
		s[p[0]].a = k.p.get()
		k.g.i(uzp1("4s", s[p[0]].a, a01, a23))
		if p[1] != p[0] {
			k.g.i(uzp2("4s", a23, a01, a23))
			s[p[1]].a, a23 = a23, -1
		}
		k.p.put(a01, a23)
	}
	return s
}
