package llama

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/specula/specula/internal/kernels"
	"github.com/specula/specula/kvcache"
	"github.com/specula/specula/model"
)

// Options tune a loaded model.
type Options struct {
	// Threads is how many threads a forward pass uses; 0 means GOMAXPROCS.
	Threads int
	// KVBudget is the memory, in bytes, set aside for all sequences' keys and
	// values. 0 means four sequences at full context, at least 64 MiB and at most
	// 2 GiB. Memory is only touched as sequences grow.
	KVBudget int64
	// ContextLength, when positive, lowers the model's context length.
	ContextLength int
	// Progress, when set, makes loading read every page of the weights once — so
	// the first request does not wait for the file — and reports the bytes read.
	Progress func(done, total int64)
}

// layer holds one transformer block's weights.
type layer struct {
	attnNorm          []float32
	wq, wk, wv, wo    *kernels.Matrix
	bq, bk, bv        []float32
	ffnNorm           []float32
	wGate, wUp, wDown *kernels.Matrix
}

// Model is a loaded Llama-family model. It is safe for concurrent use.
type Model struct {
	cfg     Config
	name    string
	embed   *kernels.Matrix // Vocab × Dim
	layers  []layer
	outNorm []float32
	output  *kernels.Matrix // Vocab × Dim; the embedding when tied
	invFreq []float64

	threads  *kernels.Pool
	kv       *kvcache.Pool
	closers  []io.Closer
	warmSink byte // keeps the warm-up reads from being optimised away
}

// Config returns the model's shape.
func (m *Model) Config() Config { return m.cfg }

// Info implements [model.Model].
func (m *Model) Info() model.Info {
	return model.Info{Name: m.name, Arch: m.cfg.Arch, VocabSize: m.cfg.Vocab, ContextLength: m.cfg.ContextLength}
}

// KVStats reports the key/value memory: blocks in use and free, bytes.
func (m *Model) KVStats() kvcache.Stats { return m.kv.Stats() }

// KVBytesPerPosition is the key/value memory one position of a sequence takes, all
// layers together: what attention reads per position at every decoding step.
func (m *Model) KVBytesPerPosition() int64 {
	c := &m.cfg
	return int64(c.Layers) * 2 * int64(c.KVHeads*c.HeadDim) * 4
}

// Kernels names the instruction set of the CPU kernels in use on this machine.
func Kernels() string { return kernels.Name() }

// StreamRead reads b the way the products read weights (vector loads, each cache line
// asked for well ahead) and returns a checksum of it: a probe of the memory bandwidth a
// forward pass can reach, for benchmarks.
func StreamRead(b []byte) uint64 { return kernels.StreamRead(b) }

// Close releases the model's threads and unmaps its files. Sequences must be closed
// first.
func (m *Model) Close() error {
	m.threads.Close()
	var errs []error
	for _, c := range m.closers {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// finish validates the assembled model and starts its threads and cache.
func (m *Model) finish(opts Options) error {
	c := &m.cfg
	if opts.ContextLength > 0 && (c.ContextLength == 0 || opts.ContextLength < c.ContextLength) {
		c.ContextLength = opts.ContextLength
	}
	if err := c.validate(); err != nil {
		return err
	}
	m.invFreq = c.InvFreqs()
	perToken := int64(c.Layers) * 2 * int64(c.KVHeads) * int64(c.HeadDim) * 4
	budget := opts.KVBudget
	if budget <= 0 {
		ctx := int64(c.ContextLength)
		if ctx == 0 {
			ctx = 4096
		}
		budget = min(max(4*ctx*perToken, 64<<20), 2<<30)
	}
	kv, err := kvcache.NewPool(kvcache.Config{Layers: c.Layers, KVHeads: c.KVHeads, HeadDim: c.HeadDim,
		BlockSize: attnBlock, Budget: budget, KeysTransposed: true})
	if err != nil {
		return fmt.Errorf("key/value cache: %w", err)
	}
	m.kv = kv
	m.threads = kernels.NewPool(opts.Threads)
	if opts.Progress != nil {
		m.warm(opts.Progress)
	}
	return nil
}

// matrices lists the model's weight matrices, each once.
func (m *Model) matrices() []*kernels.Matrix {
	out := []*kernels.Matrix{m.embed}
	for _, ly := range m.layers {
		out = append(out, ly.wq, ly.wk, ly.wv, ly.wo, ly.wGate, ly.wUp, ly.wDown)
	}
	if m.output != m.embed {
		out = append(out, m.output)
	}
	return out
}

// warm touches every page of the weights, reporting progress about every 1%.
func (m *Model) warm(progress func(done, total int64)) {
	ms := m.matrices()
	var total, done, next int64
	for _, mx := range ms {
		total += int64(len(mx.Data))
	}
	progress(0, total)
	var sink byte
	for _, mx := range ms {
		for i := 0; i < len(mx.Data); i += 4096 {
			sink ^= mx.Data[i]
			done = min(done+4096, total)
			if done >= next {
				progress(done, total)
				next = done + total/100
			}
		}
	}
	m.warmSink = sink
	progress(total, total)
}

// NewSequence implements [model.Model].
func (m *Model) NewSequence(ctx context.Context) (model.Sequence, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("llama: new sequence: %w", err)
	}
	return &sequence{m: m, kv: m.kv.NewSeq(), scores: make(chan []float32, m.threads.Threads())}, nil
}
