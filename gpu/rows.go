package gpu

import (
	"errors"
	"fmt"

	"github.com/specula/specula/backend"
)

// hostRows is the device memory of the products and lookups of host rows
// ([Backend.MulRows], [Backend.EmbedRow]), grown as larger ones come.
type hostRows struct {
	in, out, gathered, token devBuf
	row                      [1]int32 // EmbedRow's row number, on its way to token
}

// devBuf is a device buffer of a size that only grows.
type devBuf struct {
	p     devptr
	bytes int64
}

// fit makes the buffer hold at least bytes.
func (d *devBuf) fit(b deviceOps, bytes int64, what string) error {
	if bytes <= d.bytes {
		return nil
	}
	if err := d.free(b); err != nil {
		return err
	}
	size := max(bytes, 256)
	p, err := b.alloc(size)
	if err != nil {
		return fmt.Errorf("cuda: buffer for %s of %d bytes: %w", what, size, err)
	}
	*d = devBuf{p: p, bytes: size}
	return nil
}

// free releases the buffer.
func (d *devBuf) free(b deviceOps) error {
	if d.p == 0 {
		return nil
	}
	err := b.free(d.p)
	*d = devBuf{}
	return err
}

// free releases every buffer.
func (r *hostRows) free(b deviceOps) error {
	return errors.Join(r.in.free(b), r.out.free(b), r.gathered.free(b), r.token.free(b))
}

// errForeign is the error of a weight that another backend took in.
var errForeign = errors.New("cuda: a weight taken in by another backend")

// errPermutedTable refuses an embedding table whose columns were permuted: a row of
// it is read as it is stored, so its columns must be in the inputs' order.
var errPermutedTable = errors.New("cuda: an embedding table with its columns permuted")

// MulRows implements [backend.Backend]: the rows are uploaded, multiplied by the
// kernels of a pass's Mul, and the products copied back, in one turn on the device.
func (g *Backend) MulRows(w backend.Matrix, x []float32, n int, y []float32) error {
	m, ok := w.(*dmatrix)
	if !ok {
		return errForeign
	}
	cols := m.parts[0].cols
	if err := backend.CheckMulRows(n, m.rows, cols, x, y); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	if n == 0 {
		return nil
	}
	return g.do(func(b deviceOps) error {
		r := &g.rows
		if err := r.in.fit(b, int64(4*len(x)), "input rows"); err != nil {
			return err
		}
		if err := r.out.fit(b, int64(4*len(y)), "output rows"); err != nil {
			return err
		}
		if m.permuted() {
			if err := r.gathered.fit(b, int64(4*len(x)), "gathered input rows"); err != nil {
				return err
			}
		}
		if err := b.upload(r.in.p, bytesOf(x)); err != nil {
			return err
		}
		p := product{out: r.out.p, ldo: m.rows, x: r.in.p, gathered: r.gathered.p, n: n, cols: cols}
		if err := multiply(b, p, m, false); err != nil {
			return err
		}
		return b.download(bytesOf(y), r.out.p)
	})
}

// EmbedRow implements [backend.Backend]: the row is decoded by the kernel of a
// pass's Embed and copied back.
func (g *Backend) EmbedRow(w backend.Matrix, i int, dst []float32) error {
	m, ok := w.(*dmatrix)
	switch {
	case !ok:
		return errForeign
	case m.permuted():
		return errPermutedTable
	}
	part, row, err := backend.TableRow(m.offs, m.rows, i)
	if err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	t := m.parts[part]
	if len(dst) != t.cols {
		return fmt.Errorf("cuda: a row of %d values into %d", t.cols, len(dst))
	}
	return g.do(func(b deviceOps) error {
		r := &g.rows
		if err := r.token.fit(b, 4, "a row number"); err != nil {
			return err
		}
		if err := r.out.fit(b, int64(4*len(dst)), "a row"); err != nil {
			return err
		}
		r.row[0] = int32(row)
		if err := b.upload(r.token.p, bytesOf(r.row[:])); err != nil {
			return err
		}
		if err := b.embed(r.out.p, t, r.token.p, 1); err != nil {
			return err
		}
		return b.download(bytesOf(dst), r.out.p)
	})
}
