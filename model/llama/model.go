package llama

import (
	"context"
	"fmt"

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
	// Progress, when set, is told how loading goes: the bytes of the file's tensors
	// copied into the kernels' layout so far, out of all of them, about every 1 %,
	// and done == total at the end.
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

	threads *kernels.Pool
	kv      *kvcache.Pool
}

// Config returns the model's shape.
func (m *Model) Config() Config { return m.cfg }

// Info implements [model.Model].
func (m *Model) Info() model.Info {
	return model.Info{Name: m.name, Arch: m.cfg.Arch, VocabSize: m.cfg.Vocab, ContextLength: m.cfg.ContextLength}
}

// KVStats reports the key/value memory: blocks in use and free, bytes.
func (m *Model) KVStats() kvcache.Stats { return m.kv.Stats() }

// Kernels names the instruction set of the CPU kernels in use on this machine.
func Kernels() string { return kernels.Name() }

// Close releases the model's threads. Sequences must be closed first.
func (m *Model) Close() error {
	m.threads.Close()
	return nil
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
	perToken := c.KVBytesPerPosition()
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
	return nil
}

// NewSequence implements [model.Model].
func (m *Model) NewSequence(ctx context.Context) (model.Sequence, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("llama: new sequence: %w", err)
	}
	return &sequence{m: m, kv: m.kv.NewSeq(), scores: make(chan []float32, m.threads.Threads())}, nil
}

// Forward implements [model.Model].
func (m *Model) Forward(ctx context.Context, work []model.Work) error {
	if err := model.CheckWork(work); err != nil {
		return fmt.Errorf("llama: %w", err)
	}
	for i, w := range work {
		if err := w.Seq.Forward(ctx, w.Batch, w.Logits); err != nil {
			for _, d := range work[:i] {
				_ = d.Seq.Truncate(d.Seq.Len() - len(d.Batch.Tokens))
			}
			return fmt.Errorf("work item %d: %w", i, err)
		}
	}
	return nil
}
