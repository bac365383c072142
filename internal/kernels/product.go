package kernels

import "fmt"

// MaxParts is the most matrices one [Product] multiplies side by side.
const MaxParts = 3

// Product runs the product of a batch of activations with up to MaxParts matrices side
// by side — Q, K and V, or gate and up — in one parallel run over their row groups,
// the activations prepared once for every weight type. A Product holds the run's
// state: keep one per goroutine, reuse it.
type Product struct {
	acts [MaxParts]*Act
	n    int
	ldy  int
	mats [MaxParts]*Matrix
	outs [MaxParts][]float32
}

// Compute computes, for each matrix i, y[t·ldy + offs[i] + r] = mats[i][r] · x[t] for
// every activation row t of acts[i], whose rows it prepares first, on the pool's
// threads. The matrices usually share one Act (the same pointer in every acts[i]);
// parts whose columns are in different orders each read their own (see [Gather]).
// The acts must have the same number of rows.
func (p *Product) Compute(pool *Pool, acts []*Act, y []float32, ldy int, mats []*Matrix, offs []int) error {
	if len(mats) > MaxParts || len(acts) != len(mats) {
		return fmt.Errorf("kernels: a product of %d matrices side by side with %d activations; at most %d", len(mats), len(acts), MaxParts)
	}
	total := 0
	for i, m := range mats {
		if acts[i].n != acts[0].n {
			return fmt.Errorf("kernels: activations of %d and %d rows in one product", acts[i].n, acts[0].n)
		}
		if err := acts[i].Prepare(m.Type); err != nil {
			return err
		}
		total += groups(m)
	}
	*p = Product{n: len(mats), ldy: ldy}
	for i, m := range mats {
		p.acts[i], p.mats[i], p.outs[i] = acts[i], m, y[offs[i]:]
	}
	pool.Run(p, total, 1)
	return nil
}

// groups is the number of row groups of a matrix, the unit the products are shared
// out in.
func groups(m *Matrix) int { return (m.Rows + RowGroup - 1) / RowGroup }

// Run implements [Task]: the row groups [lo, hi) of the matrices stacked on each other.
func (p *Product) Run(lo, hi int) {
	off := 0
	for i := range p.n {
		m := p.mats[i]
		g0, g1 := max(lo, off)-off, min(hi, off+groups(m))-off
		if g0 < g1 {
			m.Mul(p.acts[i], p.outs[i], p.ldy, g0*RowGroup, min(g1*RowGroup, m.Rows))
		}
		off += groups(m)
	}
}
