package kernels

import "unsafe"

// The pure-Go float kernels. Each computes, for the n activation rows of one packed
// group, out[t·ldo] = w · x[t] over the first 8·chunks columns. They define what the
// assembly computes.

func f32s(b []byte) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

func u16s(b []byte) []uint16 {
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/2)
}

// floatDot is the shared body of the float kernels; decode turns the 8 weights of a
// chunk into float32.
func floatDot(n int, x []float32, chunks int, out []float32, ldo int, decode func(c int, ws *[8]float32)) {
	var acc [Group]float32
	var ws [8]float32
	for c := range chunks {
		decode(c, &ws)
		for t := range n {
			xs := x[(c*n+t)*8 : (c*n+t+1)*8]
			var s float32
			for j := range 8 {
				s += ws[j] * xs[j]
			}
			acc[t] += s
		}
	}
	for t := range n {
		out[t*ldo] = acc[t]
	}
}

func goDotF32(n int, w []byte, x []float32, chunks int, out []float32, ldo int) {
	wf := f32s(w)
	floatDot(n, x, chunks, out, ldo, func(c int, ws *[8]float32) { copy(ws[:], wf[c*8:]) })
}

type (
	floatKernel  func(w []byte, x []float32, chunks int, out []float32, ldo int)
	floatKernel2 func(w []byte, wstride int, x []float32, chunks int, out []float32, ldo int)
)

// rowsFor is how many weight rows the multi-row float kernels take at once with n
// activation rows (1: none). It must agree with the generator's (see _gen).
func rowsFor(n int) int {
	switch {
	case n <= 1:
		return 4
	case n <= 6:
		return 2
	}
	return 1
}

// goMulti makes a multi-row kernel table from a one-row table: the pure-Go twin of
// the multi-row assembly.
func goMulti(t [Group + 1]floatKernel) (m [Group + 1]floatKernel2) {
	for i := 1; i <= Group; i++ {
		k, R := t[i], rowsFor(i)
		if R == 1 {
			continue
		}
		m[i] = func(w []byte, wstride int, x []float32, chunks int, out []float32, ldo int) {
			for r := range R {
				k(w[r*wstride:], x, chunks, out[r:], ldo)
			}
		}
	}
	return m
}

// goFloat makes a kernel table, indexed by the number of rows, from a
// pure-Go kernel.
func goFloat(k func(n int, w []byte, x []float32, chunks int, out []float32, ldo int)) (t [Group + 1]floatKernel) {
	for i := 1; i <= Group; i++ {
		t[i] = func(w []byte, x []float32, chunks int, out []float32, ldo int) { k(i, w, x, chunks, out, ldo) }
	}
	return t
}
