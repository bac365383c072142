package gpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/internal/kernels"
	"github.com/specula/specula/kvcache"
	"github.com/specula/specula/model"
	"github.com/specula/specula/model/llama"
)

// Options tune a model loaded on a device.
type Options struct {
	// KVBudget is the device memory, in bytes, set aside (allocated at load) for all
	// sequences' keys and values. 0 means four sequences at full context, at least
	// 64 MiB and at most 4 GiB.
	KVBudget int64
	// ContextLength, when positive, lowers the model's context length.
	ContextLength int
	// BlockSize is the number of positions per key/value block; 0 means 16.
	BlockSize int
	// MaxBatch is the most tokens one pass over the layers takes: longer batches
	// (prompts) are cut into passes of this many, which bounds the scratch memory.
	// 0 means 256.
	MaxBatch int
}

// proj is a projection: one or more weight matrices whose outputs sit side by side in
// each output row, at the given column offsets. Matrices of one type are stacked
// into one at load, so the product is one launch.
type proj struct {
	parts []wtensor
	offs  []int
}

// layerWeights are one transformer block's weights on the device.
type layerWeights struct {
	attnNorm, ffnNorm devptr // F32 vectors
	bias              devptr // Q, K, V biases side by side, or 0
	qkv, o            proj
	gateUp, down      proj
}

// Model is a Llama-family model (the architectures and weight types of model/llama:
// llama and qwen2; F32, F16, BF16 and Q8_0 weights) whose weights live on a device,
// with a device-resident paged key/value cache. It implements [model.Model] and is
// safe for concurrent use; sequences of one device run one at a time.
type Model struct {
	dev     *Device
	cfg     llama.Config
	name    string
	opts    Options
	invFreq []float64

	embed, output wtensor
	layers        []layerWeights
	outNorm       devptr
	allocs        []devptr // every weight allocation, freed by Close
	weightBytes   int64
	perToken      int64 // weight bytes read to decode one token

	pool   *blockPool
	kvBase devptr
	s      scratch
	closed bool
}

// scratch holds the activation buffers of one pass, grown as larger passes come.
type scratch struct {
	tokens                    int // capacity in tokens
	x, xn, qkv, q, att, gu, h devptr
	outs                      int // capacity in output rows
	rows, logits              devptr
	metaBytes                 int64
	meta                      devptr
	pairBytes                 int64
	pairs                     devptr
	stage                     []byte
	logitStage                []float32
}

// Config returns the model's shape.
func (m *Model) Config() llama.Config { return m.cfg }

// Info implements [model.Model].
func (m *Model) Info() model.Info {
	return model.Info{Name: m.name, Arch: m.cfg.Arch, VocabSize: m.cfg.Vocab, ContextLength: m.cfg.ContextLength}
}

// Device returns the device the model is loaded on.
func (m *Model) Device() *Device { return m.dev }

// WeightBytes returns the device memory the weights take.
func (m *Model) WeightBytes() int64 { return m.weightBytes }

// DecodeBytes returns the weight bytes one decoding step reads: every layer's
// matrices and the output matrix (of the embedding, one row).
func (m *Model) DecodeBytes() int64 { return m.perToken }

// KVStats reports the key/value memory: blocks in use and free, bytes. The whole
// budget is allocated at load, so ResidentBytes is the pool's size.
func (m *Model) KVStats() kvcache.Stats {
	var st kvcache.Stats
	_ = m.dev.do(func(backend) error {
		st = m.pool.stats()
		return nil
	})
	return st
}

// checkConfig validates a shape for the runner.
func checkConfig(c llama.Config) error {
	switch {
	case c.Arch != "llama" && c.Arch != "qwen2":
		return fmt.Errorf("architecture %q is not supported (llama and qwen2 are)", c.Arch)
	case c.Dim <= 0 || c.Layers <= 0 || c.Heads <= 0 || c.KVHeads <= 0 || c.FFN <= 0 || c.Vocab <= 0:
		return fmt.Errorf("dimensions must be positive: dim %d, layers %d, heads %d, kv heads %d, ffn %d, vocab %d",
			c.Dim, c.Layers, c.Heads, c.KVHeads, c.FFN, c.Vocab)
	case c.Heads%c.KVHeads != 0:
		return fmt.Errorf("%d heads are not a multiple of %d kv heads", c.Heads, c.KVHeads)
	case c.HeadDim <= 0 || c.HeadDim%2 != 0 || c.HeadDim > maxHeadDim:
		return fmt.Errorf("head dimension %d must be even and in (0, %d]", c.HeadDim, maxHeadDim)
	case c.RopeDim <= 0 || c.RopeDim > c.HeadDim || c.RopeDim%2 != 0:
		return fmt.Errorf("rotary dimension %d must be even and within the head dimension %d", c.RopeDim, c.HeadDim)
	case !(c.RopeTheta > 0) || !(c.NormEps > 0):
		return fmt.Errorf("rope theta %v and norm epsilon %v must be positive", c.RopeTheta, c.NormEps)
	case c.RopeFreqFactors != nil && len(c.RopeFreqFactors) != c.RopeDim/2:
		return fmt.Errorf("%d rope frequency factors for %d rotary dimensions", len(c.RopeFreqFactors), c.RopeDim)
	case c.RopeStyle != llama.RopeInterleaved && c.RopeStyle != llama.RopeHalf:
		return fmt.Errorf("rope style %d", c.RopeStyle)
	case c.ContextLength < 0:
		return fmt.Errorf("context length %d", c.ContextLength)
	}
	return nil
}

// weightSource provides a model's weights to upload: from a file, or random.
type weightSource interface {
	// matrices returns a projection of the named matrices (rows[i] × cols each),
	// uploaded.
	matrices(b backend, m *Model, names []string, rows []int, cols int) (proj, error)
	// vector returns the named F32 vectors, uploaded side by side; kind is "norm" or
	// "bias".
	vectors(b backend, m *Model, names []string, ns []int, kind string) (devptr, error)
	hasOutput() bool
}

// Open loads a model from a GGUF file or a Hugging Face directory onto dev and
// uploads its weights. The shape is read as model/llama reads it (so both runtimes
// agree on it); weight types other than F32, F16, BF16 and Q8_0 are refused.
func Open(ctx context.Context, dev *Device, path string, opts Options) (*Model, error) {
	if dev == nil {
		return nil, errors.New("gpu: nil device")
	}
	t, err := llama.OpenTensors(path)
	if err != nil {
		return nil, fmt.Errorf("gpu: %w", err)
	}
	defer t.Close()
	fs := &fileSource{t: t, file: filepath.Base(path)}
	return build(ctx, dev, t.Config, t.Name, opts, fs, t.Names)
}

// build makes a model of shape cfg on dev with weights from ws.
func build(ctx context.Context, dev *Device, cfg llama.Config, name string, opts Options, ws weightSource, names llama.TensorNames) (_ *Model, err error) {
	if err := checkConfig(cfg); err != nil {
		return nil, fmt.Errorf("gpu: %s: %w", name, err)
	}
	if opts.ContextLength > 0 && (cfg.ContextLength == 0 || opts.ContextLength < cfg.ContextLength) {
		cfg.ContextLength = opts.ContextLength
	}
	if opts.BlockSize <= 0 {
		opts.BlockSize = kvcache.DefaultBlockSize
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 256
	}
	m := &Model{dev: dev, cfg: cfg, name: name, opts: opts, invFreq: cfg.InvFreqs()}
	defer func() {
		if err != nil {
			_ = m.Close()
		}
	}()
	err = dev.do(func(b backend) error {
		c := &m.cfg
		qd, kvd := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
		emb, err := ws.matrices(b, m, []string{names.Embed}, []int{c.Vocab}, c.Dim)
		if err != nil {
			return err
		}
		m.embed = emb.parts[0]
		for i := range c.Layers {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("gpu: loading %s: %w", name, err)
			}
			l := func(part string) string { return names.Layer(i, part) }
			var ly layerWeights
			if ly.attnNorm, err = ws.vectors(b, m, []string{l("attn_norm")}, []int{c.Dim}, "norm"); err != nil {
				return err
			}
			if ly.ffnNorm, err = ws.vectors(b, m, []string{l("ffn_norm")}, []int{c.Dim}, "norm"); err != nil {
				return err
			}
			if ly.qkv, err = ws.matrices(b, m, []string{l("q"), l("k"), l("v")}, []int{qd, kvd, kvd}, c.Dim); err != nil {
				return err
			}
			if c.QKVBias {
				if ly.bias, err = ws.vectors(b, m, []string{l("q_bias"), l("k_bias"), l("v_bias")}, []int{qd, kvd, kvd}, "bias"); err != nil {
					return err
				}
			}
			if ly.o, err = ws.matrices(b, m, []string{l("o")}, []int{c.Dim}, qd); err != nil {
				return err
			}
			if ly.gateUp, err = ws.matrices(b, m, []string{l("gate"), l("up")}, []int{c.FFN, c.FFN}, c.Dim); err != nil {
				return err
			}
			if ly.down, err = ws.matrices(b, m, []string{l("down")}, []int{c.Dim}, c.FFN); err != nil {
				return err
			}
			m.layers = append(m.layers, ly)
		}
		if m.outNorm, err = ws.vectors(b, m, []string{names.OutNorm}, []int{c.Dim}, "norm"); err != nil {
			return err
		}
		if c.TiedEmbeddings || !ws.hasOutput() {
			c.TiedEmbeddings = true
			m.output = m.embed
		} else {
			out, err := ws.matrices(b, m, []string{names.Output}, []int{c.Vocab}, c.Dim)
			if err != nil {
				return err
			}
			m.output = out.parts[0]
		}
		m.perToken = m.output.rowBytes() * int64(m.output.rows)
		for _, ly := range m.layers {
			for _, p := range []proj{ly.qkv, ly.o, ly.gateUp, ly.down} {
				for _, w := range p.parts {
					m.perToken += w.rowBytes() * int64(w.rows)
				}
			}
		}
		return m.makePool(b)
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// makePool allocates the key/value pool.
func (m *Model) makePool(b backend) error {
	c := &m.cfg
	geom := kvGeom{layers: c.Layers, kvHeads: c.KVHeads, headDim: c.HeadDim, blockSize: m.opts.BlockSize}
	perToken := int64(c.Layers) * 2 * int64(c.KVHeads) * int64(c.HeadDim) * 4
	budget := m.opts.KVBudget
	if budget <= 0 {
		ctx := int64(c.ContextLength)
		if ctx == 0 {
			ctx = 4096
		}
		budget = min(max(4*ctx*perToken, 64<<20), 4<<30)
	}
	blockBytes := 4 * geom.blockFloats()
	blocks := budget / blockBytes
	if blocks < 1 {
		return fmt.Errorf("gpu: key/value budget of %d bytes is smaller than one block of %d bytes", budget, blockBytes)
	}
	blocks = min(blocks, math.MaxInt32)
	p, err := b.alloc(blocks * blockBytes)
	if err != nil {
		return fmt.Errorf("gpu: key/value pool of %d blocks (%d bytes): %w", blocks, blocks*blockBytes, err)
	}
	m.kvBase = p
	geom.base = p
	m.pool = newBlockPool(geom, int(blocks), budget)
	return nil
}

// alloc allocates device memory that Close frees.
func (m *Model) alloc(b backend, bytes int64) (devptr, error) {
	p, err := b.alloc(bytes)
	if err != nil {
		return 0, err
	}
	m.allocs = append(m.allocs, p)
	m.weightBytes += bytes
	return p, nil
}

// fileSource uploads weights read from a file.
type fileSource struct {
	t    *llama.Tensors
	file string
}

func (f *fileSource) hasOutput() bool {
	_, _, _, ok := f.t.Lookup(f.t.Names.Output)
	return ok
}

// supportedWeight reports whether the runner multiplies by weights of type t.
func supportedWeight(t dtype.DType) bool {
	return t == dtype.F32 || t == dtype.F16 || t == dtype.BF16 || t == dtype.Q8_0
}

func (f *fileSource) matrices(b backend, m *Model, names []string, rows []int, cols int) (proj, error) {
	type part struct {
		t    dtype.DType
		data []byte
	}
	parts := make([]part, len(names))
	for i, name := range names {
		t, shape, data, ok := f.t.Lookup(name)
		switch {
		case !ok:
			return proj{}, fmt.Errorf("gpu: %s: tensor %q missing", f.file, name)
		case !supportedWeight(t):
			return proj{}, fmt.Errorf("gpu: %s: tensor %q has type %s; the GPU runner supports F32, F16, BF16 and Q8_0", f.file, name, t)
		case len(shape) != 2 || shape[0] != int64(rows[i]) || shape[1] != int64(cols):
			return proj{}, fmt.Errorf("gpu: %s: tensor %q has shape %v, want [%d %d]", f.file, name, shape, rows[i], cols)
		}
		rb, err := t.Bytes(int64(cols))
		if err != nil || int64(len(data)) != rb*int64(rows[i]) {
			return proj{}, fmt.Errorf("gpu: %s: tensor %q: %d bytes for %d × %d %s", f.file, name, len(data), rows[i], cols, t)
		}
		parts[i] = part{t, data}
	}
	same := true
	for _, p := range parts {
		same = same && p.t == parts[0].t
	}
	var out proj
	upload := func(ps []part, rs []int) (wtensor, error) {
		total := int64(0)
		for _, p := range ps {
			total += int64(len(p.data))
		}
		ptr, err := m.alloc(b, total)
		if err != nil {
			return wtensor{}, fmt.Errorf("gpu: %s: tensor %q: %w", f.file, names[0], err)
		}
		off := int64(0)
		n := 0
		for _, p := range ps {
			if err := b.upload(ptr+devptr(off), p.data); err != nil {
				return wtensor{}, fmt.Errorf("gpu: %s: uploading %q: %w", f.file, names[0], err)
			}
			off += int64(len(p.data))
		}
		for _, r := range rs {
			n += r
		}
		return wtensor{typ: ps[0].t, rows: n, cols: cols, p: ptr}, nil
	}
	if same {
		w, err := upload(parts, rows)
		if err != nil {
			return out, err
		}
		out.parts, out.offs = []wtensor{w}, []int{0}
		return out, nil
	}
	off := 0
	for i, p := range parts {
		w, err := upload([]part{p}, rows[i:i+1])
		if err != nil {
			return out, err
		}
		out.parts = append(out.parts, w)
		out.offs = append(out.offs, off)
		off += rows[i]
	}
	return out, nil
}

func (f *fileSource) vectors(b backend, m *Model, names []string, ns []int, kind string) (devptr, error) {
	var vals []float32
	for i, name := range names {
		t, shape, data, ok := f.t.Lookup(name)
		if !ok {
			return 0, fmt.Errorf("gpu: %s: tensor %q missing", f.file, name)
		}
		if len(shape) != 1 || shape[0] != int64(ns[i]) {
			return 0, fmt.Errorf("gpu: %s: tensor %q has shape %v, want [%d]", f.file, name, shape, ns[i])
		}
		v := make([]float32, ns[i])
		if err := kernels.Dequantize(t, data, v); err != nil {
			return 0, fmt.Errorf("gpu: %s: tensor %q: %w", f.file, name, err)
		}
		vals = append(vals, v...)
	}
	p, err := m.alloc(b, int64(4*len(vals)))
	if err != nil {
		return 0, fmt.Errorf("gpu: %s: %s %q: %w", f.file, kind, names[0], err)
	}
	if err := b.upload(p, bytesOf(vals)); err != nil {
		return 0, fmt.Errorf("gpu: %s: uploading %q: %w", f.file, names[0], err)
	}
	return p, nil
}

// Close frees the model's device memory. Its sequences must be closed first.
func (m *Model) Close() error {
	return m.dev.do(func(b backend) error {
		if m.closed {
			return nil
		}
		m.closed = true
		var errs []error
		for _, p := range m.allocs {
			errs = append(errs, b.free(p))
		}
		m.allocs = nil
		for _, p := range []devptr{m.kvBase, m.s.x, m.s.xn, m.s.qkv, m.s.q, m.s.att, m.s.gu, m.s.h,
			m.s.rows, m.s.logits, m.s.meta, m.s.pairs} {
			if p != 0 {
				errs = append(errs, b.free(p))
			}
		}
		m.kvBase, m.s = 0, scratch{}
		return errors.Join(errs...)
	})
}
