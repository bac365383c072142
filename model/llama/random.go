package llama

import (
	"fmt"
	"math"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/format/dtype"
)

// NewRandom is benchmark and test support, not for serving: it makes a model of shape
// cfg whose weights are pseudo-random values of type typ made by the backend itself (a
// device fills its own memory: nothing is read from disk or copied from the host), to
// measure a device at real sizes without a file (examples/gpubench). A matrix of
// c columns holds values uniform in ±√(3/c) (the embedding ±√3), norms (per-head and
// post-norms too) 1 ± 0.1, biases ±0.5. The same seed gives the same weights on every backend that can make them: the
// CUDA backend's, on a GPU or the host device; the CPU backend cannot.
func NewRandom(cfg Config, typ dtype.DType, seed uint64, b backend.Factory, opts Options) (*Model, error) {
	if cfg.RopeDim == 0 {
		cfg.RopeDim = cfg.HeadDim
	}
	cfg.limitContext(opts.ContextLength)
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("llama: random model: %w", err)
	}
	be, err := newBackend(&cfg, b)
	if err != nil {
		return nil, fmt.Errorf("llama: random model: %w", err)
	}
	name := fmt.Sprintf("random-%s-%dx%d-%s", cfg.Arch, cfg.Layers, cfg.Dim, typ)
	m := &Model{cfg: cfg, name: name, be: be, invFreq: cfg.InvFreqs(), localInvFreq: cfg.LocalInvFreqs()}
	f, ok := be.(filler)
	if !ok {
		_ = m.Close()
		return nil, fmt.Errorf("llama: random weights are made where they live, by a device's backend; %s cannot make them", be.Name())
	}
	r := &randomWeights{f: f, typ: typ, seed: seed}
	r.fill(m)
	if r.err == nil {
		r.err = m.startCache(opts)
	}
	if r.err != nil {
		_ = m.Close()
		return nil, fmt.Errorf("llama: %s: %w", name, r.err)
	}
	return m, nil
}

// filler is a backend that makes weights of pseudo-random values where they live (the
// CUDA backend does), for [NewRandom].
type filler interface {
	// RandomMatrix makes a rows × cols matrix of type typ whose values are uniform
	// in ±scale.
	RandomMatrix(typ dtype.DType, rows, cols int, seed uint64, scale float32) (backend.Matrix, error)
	// RandomVector makes a vector of n values uniform in offset ± scale.
	RandomVector(n int, seed uint64, scale, offset float32) (backend.Vector, error)
}

// randomWeights makes a model's weights with a filler, each tensor from its own
// stream, keeping the first error.
type randomWeights struct {
	f    filler
	typ  dtype.DType
	seed uint64
	n    uint64 // tensors made so far
	err  error
}

func (r *randomWeights) next() uint64 {
	r.n++
	return r.seed*1_000_003 + r.n
}

func (r *randomWeights) matrix(rows, cols int, scale float64) backend.Matrix {
	if r.err != nil {
		return nil
	}
	m, err := r.f.RandomMatrix(r.typ, rows, cols, r.next(), float32(scale))
	r.err = err
	return m
}

func (r *randomWeights) vector(n int, scale, offset float32) backend.Vector {
	if r.err != nil {
		return nil
	}
	v, err := r.f.RandomVector(n, r.next(), scale, offset)
	r.err = err
	return v
}

// fill makes every weight of m, in the order a file would be read.
func (r *randomWeights) fill(m *Model) {
	c := &m.cfg
	qd, kvd := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	width := func(cols int) float64 { return math.Sqrt(3 / float64(cols)) }
	m.embed = r.matrix(c.Vocab, c.Dim, math.Sqrt(3))
	for range c.Layers {
		ly := layer{attnNorm: r.vector(c.Dim, 0.1, 1), ffnNorm: r.vector(c.Dim, 0.1, 1)}
		ly.qkv = r.matrix(qd+2*kvd, c.Dim, width(c.Dim))
		if c.QKVBias {
			ly.bias = r.vector(qd+2*kvd, 0.5, 0)
		}
		if c.QKNorm {
			ly.qNorm, ly.kNorm = r.vector(c.HeadDim, 0.1, 1), r.vector(c.HeadDim, 0.1, 1)
		}
		if c.PostNorms {
			ly.postAttnNorm, ly.postFFNNorm = r.vector(c.Dim, 0.1, 1), r.vector(c.Dim, 0.1, 1)
		}
		ly.o = r.matrix(c.Dim, qd, width(qd))
		ly.gateUp = r.matrix(2*c.FFN, c.Dim, width(c.Dim))
		ly.down = r.matrix(c.Dim, c.FFN, width(c.FFN))
		m.layers = append(m.layers, ly)
	}
	m.outNorm = r.vector(c.Dim, 0.1, 1)
	m.output = m.embed
	if !c.TiedEmbeddings {
		m.output = r.matrix(c.Vocab, c.Dim, width(c.Dim))
	}
}
