package gpu

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/model/llama"
)

// NewRandom makes a model of shape cfg whose weights are pseudo-random values of type
// typ (F32, F16, BF16 or Q8_0) generated on the device itself, for benchmarks: nothing is
// read from disk or copied from the host. A matrix of c columns holds values uniform
// in ±√(3/c) (the embedding ±√3), norms 1 ± 0.1, biases ±0.5. The same seed gives
// the same weights on every device, the host device included.
func NewRandom(ctx context.Context, dev *Device, cfg llama.Config, typ dtype.DType, seed uint64, opts Options) (*Model, error) {
	if dev == nil {
		return nil, errors.New("gpu: nil device")
	}
	if !supportedWeight(typ) {
		return nil, fmt.Errorf("gpu: random weights of type %s are not supported (F32, F16, BF16 and Q8_0 are)", typ)
	}
	if typ == dtype.Q8_0 {
		for _, c := range []int{cfg.Dim, cfg.Heads * cfg.HeadDim, cfg.FFN} {
			if c%32 != 0 {
				return nil, fmt.Errorf("gpu: Q8_0 random weights need matrix widths that are multiples of 32, not %d", c)
			}
		}
	}
	if cfg.RopeDim == 0 {
		cfg.RopeDim = cfg.HeadDim
	}
	name := fmt.Sprintf("random-%s-%dx%d-%s", cfg.Arch, cfg.Layers, cfg.Dim, typ)
	return build(ctx, dev, cfg, name, opts, &randomSource{typ: typ, seed: seed}, llama.GGUFNames())
}

// randomSource fills weights with the backend's fill operation.
type randomSource struct {
	typ  dtype.DType
	seed uint64
	n    uint64 // tensors made so far: each gets its own stream
}

func (r *randomSource) hasOutput() bool { return true }

func (r *randomSource) next() uint64 {
	r.n++
	return r.seed*1_000_003 + r.n
}

func (r *randomSource) matrices(b backend, m *Model, names []string, rows []int, cols int) (proj, error) {
	total := 0
	for _, n := range rows {
		total += n
	}
	w := wtensor{typ: r.typ, rows: total, cols: cols}
	bytes := w.rowBytes() * int64(total)
	p, err := m.alloc(b, bytes)
	if err != nil {
		return proj{}, fmt.Errorf("gpu: random %s of %d × %d: %w", names[0], total, cols, err)
	}
	w.p = p
	scale := float32(math.Sqrt(3 / float64(cols)))
	if names[0] == "token_embd.weight" {
		scale = float32(math.Sqrt(3))
	}
	if err := b.fill(p, r.typ, int64(total)*int64(cols), r.next(), scale, 0); err != nil {
		return proj{}, fmt.Errorf("gpu: filling %s: %w", names[0], err)
	}
	return proj{parts: []wtensor{w}, offs: []int{0}}, nil
}

func (r *randomSource) vectors(b backend, m *Model, names []string, ns []int, kind string) (devptr, error) {
	total := 0
	for _, n := range ns {
		total += n
	}
	p, err := m.alloc(b, int64(4*total))
	if err != nil {
		return 0, fmt.Errorf("gpu: random %s %s: %w", kind, names[0], err)
	}
	scale, offset := float32(0.5), float32(0)
	if kind == "norm" {
		scale, offset = 0.1, 1
	}
	if err := b.fill(p, dtype.F32, int64(total), r.next(), scale, offset); err != nil {
		return 0, fmt.Errorf("gpu: filling %s: %w", names[0], err)
	}
	return p, nil
}
