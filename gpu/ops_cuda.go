package gpu

import (
	_ "embed"
	"fmt"

	"github.com/specula/specula/backend"

	"github.com/specula/specula/format/dtype"
)

//go:embed kernels.cu
var kernelSource string

// kernelNames lists the kernels of kernels.cu the backend launches.
func kernelNames() []string {
	return []string{
		"gemv_f32", "gemv_f16", "gemv_bf16", "gemv_q8_0", "gather_cols", "embed", "rmsnorm", "head_rmsnorm", "qkv_rope",
		"attention", "glu", "scale_rows", "add_rows", "kv_copy", "to_f16", "to_bf16", "fill", "fill_q8_0",
	}
}

// Limits of the kernels.
const (
	maxHeadDim = 512 // the attention kernel keeps one query head in shared memory
	// maxSharedScores is the most positions whose attention scores fit in the
	// kernel's dynamic shared memory; beyond it they go to a scratch buffer.
	maxSharedScores  = 10240
	gemvRowsPerBlock = 8 // warps per block of the weight-product kernels
)

// cudaOps runs the primitive operations on a GPU: the small kernels compiled by
// NVRTC, weight products by its own batch-invariant kernels for small batches and by
// cuBLAS (GemmEx, fp32 accumulation) for larger ones. Everything runs on the default
// stream, so operations are ordered; copies to the host wait for the kernels before.
type cudaOps struct {
	drv    *driver
	blas   *blas
	ctx    uintptr
	dev    int32
	handle uintptr // cuBLAS
	module uintptr
	fns    map[string]uintptr
	args   *kernelArgs
	gs     *gemmScalars
	// gemmRows: batches of more rows than this use cuBLAS for F32, F16 and BF16
	// weights; up to it, the batch-invariant kernels.
	gemmRows int

	conv      devptr // activations converted for cuBLAS
	convBytes int64
	scratch   devptr // attention scores beyond shared memory
	scrBytes  int64
}

func (b *cudaOps) kind() string { return "cuda" }

func (b *cudaOps) alloc(bytes int64) (devptr, error) {
	if bytes <= 0 {
		bytes = 1
	}
	p, err := b.drv.alloc(bytes)
	return devptr(p), err
}

func (b *cudaOps) free(p devptr) error {
	if p == 0 {
		return nil
	}
	return b.drv.free(uint64(p))
}

func (b *cudaOps) upload(dst devptr, src []byte) error { return b.drv.htod(uint64(dst), src) }

func (b *cudaOps) download(dst []byte, src devptr) error { return b.drv.dtoh(dst, uint64(src)) }

// run launches a kernel with the arguments set by args.
func (b *cudaOps) run(name string, grid, block [3]int, shared int, args func(a *kernelArgs)) error {
	fn, ok := b.fns[name]
	if !ok {
		return fmt.Errorf("cuda: kernel %s was not loaded", name)
	}
	for i, g := range grid {
		if g <= 0 || (i > 0 && g > 65535) || g > 1<<31-1 {
			return fmt.Errorf("cuda: kernel %s: grid %v out of range", name, grid)
		}
	}
	b.args.reset()
	args(b.args)
	return b.drv.launch(name, fn, grid, block, shared, b.args)
}

// gridFor is a 1-D grid covering total items with blocks of 256 threads, capped (the
// kernels loop).
func gridFor(total int64) [3]int {
	g := (total + 255) / 256
	g = max(1, min(g, 65535*8))
	return [3]int{int(g), 1, 1}
}

// threads256 is the block shape of most kernels.
const threads256Count = 256

func wtCode(t dtype.DType) (int, error) {
	switch t {
	case dtype.F32:
		return 0, nil
	case dtype.F16:
		return 1, nil
	case dtype.BF16:
		return 2, nil
	case dtype.Q8_0:
		return 3, nil
	}
	return 0, fmt.Errorf("cuda: weight type %s is not supported (F32, F16, BF16 and Q8_0 are)", t)
}

func (b *cudaOps) fill(p devptr, typ dtype.DType, n int64, seed uint64, scale, offset float32) error {
	wt, err := wtCode(typ)
	if err != nil {
		return fmt.Errorf("cuda: fill of type %s is not supported", typ)
	}
	if wt == 3 {
		if n%32 != 0 {
			return fmt.Errorf("cuda: Q8_0 fill of %d values, not a multiple of 32", n)
		}
		blocks := n / 32
		return b.run("fill_q8_0", gridFor(blocks), [3]int{threads256Count, 1, 1}, 0, func(a *kernelArgs) {
			a.ptr(p).i64(blocks).u64(seed).f32(scale).f32(offset)
		})
	}
	return b.run("fill", gridFor(n), [3]int{threads256Count, 1, 1}, 0, func(a *kernelArgs) {
		a.ptr(p).i32(wt).i64(n).u64(seed).f32(scale).f32(offset)
	})
}

func (b *cudaOps) embed(out devptr, w wtensor, tokens devptr, n int) error {
	wt, err := wtCode(w.typ)
	if err != nil {
		return err
	}
	return b.run("embed", [3]int{n, 1, 1}, [3]int{threads256Count, 1, 1}, 0, func(a *kernelArgs) {
		a.ptr(out).ptr(w.p).i32(wt).ptr(tokens).i32(w.cols)
	})
}

func (b *cudaOps) rmsNorm(out, x, w, rows devptr, n, dim int, eps float32) error {
	return b.run("rmsnorm", [3]int{n, 1, 1}, [3]int{threads256Count, 1, 1}, 0, func(a *kernelArgs) {
		a.ptr(out).ptr(x).ptr(w).ptr(rows).i32(dim).f32(eps)
	})
}

func (b *cudaOps) headNorm(x, w devptr, n, width, head0, heads, hd int, eps float32) error {
	return b.run("head_rmsnorm", [3]int{n * heads, 1, 1}, [3]int{threads256Count, 1, 1}, 0, func(a *kernelArgs) {
		a.ptr(x).ptr(w).i32(width).i32(head0).i32(heads).i32(hd).f32(eps)
	})
}

func (b *cudaOps) matmul(out devptr, ldo int, x devptr, n int, w wtensor, accumulate bool) error {
	if n <= 0 {
		return nil
	}
	acc := 0
	if accumulate {
		acc = 1
	}
	if n > b.gemmRows && w.typ != dtype.Q8_0 {
		return b.gemm(out, ldo, x, n, w, accumulate)
	}
	var name string
	switch w.typ {
	case dtype.F32:
		name = "gemv_f32"
	case dtype.F16:
		name = "gemv_f16"
	case dtype.BF16:
		name = "gemv_bf16"
	case dtype.Q8_0:
		name = "gemv_q8_0"
	default:
		_, err := wtCode(w.typ)
		return err
	}
	grid := [3]int{(w.rows + gemvRowsPerBlock - 1) / gemvRowsPerBlock, (n + 7) / 8, 1}
	return b.run(name, grid, [3]int{32 * gemvRowsPerBlock, 1, 1}, 0, func(a *kernelArgs) {
		a.ptr(w.p).ptr(x).ptr(out).i32(w.rows).i32(w.cols).i32(n).i32(ldo).i32(acc)
	})
}

// gemm computes the product with cuBLAS. Row-major Y[n×rows] = X[n×cols]·Wᵀ is, in
// cuBLAS's column-major terms, Yᶜ[rows×n] = (Wᶜ)ᵀ·Xᶜ with Wᶜ = W read as cols×rows.
// F16 and BF16 weights take their activations converted to the same type.
func (b *cudaOps) gemm(out devptr, ldo int, x devptr, n int, w wtensor, accumulate bool) error {
	xp, xType, aType := x, cudaR32F, cudaR32F
	if w.typ == dtype.F16 || w.typ == dtype.BF16 {
		need := int64(n) * int64(w.cols) * 2
		if need > b.convBytes {
			if err := b.free(b.conv); err != nil {
				return err
			}
			b.conv, b.convBytes = 0, 0
			p, err := b.alloc(need)
			if err != nil {
				return err
			}
			b.conv, b.convBytes = p, need
		}
		kern, t := "to_f16", cudaR16F
		if w.typ == dtype.BF16 {
			kern, t = "to_bf16", cudaR16BF
		}
		total := int64(n) * int64(w.cols)
		if err := b.run(kern, gridFor(total), [3]int{threads256Count, 1, 1}, 0, func(a *kernelArgs) {
			a.ptr(b.conv).ptr(x).i64(total)
		}); err != nil {
			return err
		}
		xp, xType, aType = b.conv, t, t
	}
	b.gs.alpha, b.gs.beta = 1, 0
	if accumulate {
		b.gs.beta = 1
	}
	return b.blas.gemm(b.handle, b.gs, cublasOpT, cublasOpN, w.rows, n, w.cols,
		w.p, aType, w.cols, xp, xType, w.cols, out, cudaR32F, ldo)
}

func (b *cudaOps) qkv(q qkvArgs) error {
	g := q.kv
	return b.run("qkv_rope", [3]int{q.n, 1, 1}, [3]int{threads256Count, 1, 1}, 0, func(a *kernelArgs) {
		a.ptr(q.qkv).ptr(q.bias).ptr(q.rope).ptr(q.slots).ptr(q.q).ptr(g.base).
			i32(q.heads).i32(g.kvHeads).i32(g.headDim).i32(q.ropeDim).i32(q.style).
			i32(q.layer).i32(g.layers).i32(g.blockSize)
	})
}

func (b *cudaOps) attention(t attnArgs) error {
	g := t.kv
	if g.headDim > maxHeadDim {
		return fmt.Errorf("cuda: head dimension %d is above the attention kernel's %d", g.headDim, maxHeadDim)
	}
	// Scores live in shared memory when they fit; else in a scratch buffer, for as
	// many tokens at a time as 256 MiB of scores allow.
	shared, ld, step := 0, int64(0), t.n
	if t.maxVisible <= maxSharedScores {
		shared = 4 * max(t.maxVisible, 1)
	} else {
		ld = int64(t.maxVisible)
		per := ld * 4 * int64(t.heads)
		step = int(max(1, min(int64(t.n), (256<<20)/per)))
		if need := per * int64(step); need > b.scrBytes {
			if err := b.free(b.scratch); err != nil {
				return err
			}
			b.scratch, b.scrBytes = 0, 0
			p, err := b.alloc(need)
			if err != nil {
				return err
			}
			b.scratch, b.scrBytes = p, need
		}
	}
	scratch := devptr(0)
	if ld > 0 {
		scratch = b.scratch
	}
	hd := int64(g.headDim)
	for i0 := 0; i0 < t.n; i0 += step {
		n := min(step, t.n-i0)
		off := devptr(4 * i0)
		rowOff := devptr(4 * int64(i0) * int64(t.heads) * hd)
		err := b.run("attention", [3]int{n, t.heads, 1}, [3]int{threads256Count, 1, 1}, shared, func(a *kernelArgs) {
			a.ptr(t.q + rowOff).ptr(t.out + rowOff).ptr(g.base).ptr(t.table).
				ptr(t.prefix + off).ptr(t.extraOff + off).ptr(t.extraCnt + off).ptr(t.extras).
				ptr(scratch).i64(ld).i32(t.base).i32(t.heads).i32(g.kvHeads).i32(g.headDim).
				i32(t.layer).i32(g.layers).i32(g.blockSize).f32(t.scale).i32(t.window)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (b *cudaOps) gather(out, x, perm devptr, n, cols int) error {
	total := int64(n) * int64(cols)
	return b.run("gather_cols", gridFor(total), [3]int{threads256Count, 1, 1}, 0, func(a *kernelArgs) {
		a.ptr(out).ptr(x).ptr(perm).i64(total).i32(cols)
	})
}

func (b *cudaOps) glu(out, gu devptr, n, ffn int, act backend.Activation) error {
	total := int64(n) * int64(ffn)
	return b.run("glu", gridFor(total), [3]int{threads256Count, 1, 1}, 0, func(a *kernelArgs) {
		a.ptr(out).ptr(gu).i64(total).i32(ffn).i32(int(act))
	})
}

func (b *cudaOps) scale(x devptr, total int64, s float32) error {
	return b.run("scale_rows", gridFor(total), [3]int{threads256Count, 1, 1}, 0, func(a *kernelArgs) {
		a.ptr(x).i64(total).f32(s)
	})
}

func (b *cudaOps) add(y, x devptr, total int64) error {
	return b.run("add_rows", gridFor(total), [3]int{threads256Count, 1, 1}, 0, func(a *kernelArgs) {
		a.ptr(y).ptr(x).i64(total)
	})
}

func (b *cudaOps) kvCopy(g kvGeom, pairs devptr, m int) error {
	if m == 0 {
		return nil
	}
	return b.run("kv_copy", [3]int{g.runs(), 1, 1}, [3]int{min(256, (g.headDim+31)/32*32), 1, 1}, 0, func(a *kernelArgs) {
		a.ptr(g.base).ptr(pairs).i32(m).i32(g.blockSize).i32(g.headDim)
	})
}

func (b *cudaOps) sync() error { return b.drv.synchronize() }

func (b *cudaOps) close() error {
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	keep(b.free(b.conv))
	keep(b.free(b.scratch))
	b.conv, b.scratch = 0, 0
	if b.handle != 0 {
		keep(b.blas.check("cublasDestroy", call(b.blas.destroy, b.handle)))
		b.handle = 0
	}
	if b.module != 0 {
		keep(b.drv.unloadModule(b.module))
		b.module = 0
	}
	if b.ctx != 0 {
		keep(b.drv.releaseCtx(b.dev))
		b.ctx = 0
	}
	return first
}
