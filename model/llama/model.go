package llama

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/kvcache"
	"github.com/specula/specula/model"
)

// Options tune a loaded model.
type Options struct {
	// KVBudget is the memory, in bytes, set aside for all sequences' keys and
	// values. 0 means [Config.KVBudget] of Sequences. On the CPU memory is only
	// touched as sequences grow; a GPU allocates it at load.
	KVBudget int64
	// Sequences is how many sequences at full context the default KVBudget holds (0:
	// see [Config.KVBudget]).
	Sequences int
	// ContextLength, when positive, lowers the model's context length. For a longrope
	// model it also picks the rotary factors: the short ones at or below the original
	// context (see [Config.RopeFactors]).
	ContextLength int
	// Requantize, when set (Q8_0), converts the weight matrices the float kernels
	// run (F32, F16, BF16, FP8) to that type as they are taken in: a draft layer's
	// weights at half the bytes, read at every drafted token, or an FP8 target on the
	// cheaper integer kernels, lossily. Integer-coded matrices are taken as they are.
	Requantize dtype.DType
	// Progress, when set, is told how loading goes: the bytes of the file's tensors
	// taken in by the backend so far, out of all of them, about every 1 %, and
	// done == total at the end.
	Progress func(done, total int64)
}

// layer holds one transformer block's weights, in the backend.
type layer struct {
	attnNorm, ffnNorm backend.Vector
	qkv, o            backend.Matrix // Q, K and V side by side
	bias              backend.Vector // Q, K and V biases side by side; nil: none
	qNorm, kNorm      backend.Vector // the per-head norms of Q and K (Config.QKNorm); nil: none
	gateUp, down      backend.Matrix // gate and up side by side
	// The norms of the attention and feed-forward outputs (Config.PostNorms); nil:
	// none.
	postAttnNorm, postFFNNorm backend.Vector
}

// Model is a loaded Llama-family model. It is safe for concurrent use.
type Model struct {
	cfg     Config
	name    string
	be      backend.Backend
	embed   backend.Matrix // Vocab × Dim
	layers  []layer
	outNorm backend.Vector // nil for an EAGLE layer
	output  backend.Matrix // Vocab × Dim; the embedding when tied
	// An EAGLE draft layer's input product, fc = [fcEmbed | fcHidden] over the
	// embedding and the hidden state given beside each token; nil for a plain model.
	fcEmbed, fcHidden backend.Matrix
	e3                *eagle3 // an EAGLE-3 head's parts; nil for another model
	invFreq           []float64
	localInvFreq      []float64     // the sliding layers' (Config.LocalRopeTheta); nil: none
	kv                *kvcache.Pool // every layer's, or the global layers' beside slidingKV
	slidingKV         *kvcache.Pool // the sliding layers', when they sit beside global ones; nil: none
	slidesAll         bool          // every layer slides: the one pool gives back what lies behind the window
	closed            atomic.Bool

	plans sync.Pool // *backend.Plan: the plans of finished forwards, for the next
}

// Config returns the model's shape.
func (m *Model) Config() Config { return m.cfg }

// Info implements [model.Model].
func (m *Model) Info() model.Info {
	info := model.Info{Name: m.name, Arch: m.cfg.Arch, VocabSize: m.cfg.Vocab, ContextLength: m.cfg.ContextLength,
		HiddenSize: m.cfg.Dim, Layers: m.cfg.Layers}
	if m.fcEmbed != nil || m.e3 != nil {
		info.InputSize = m.cfg.Dim
	}
	if m.e3 != nil {
		info.TokenVocab = m.e3.tokenVocab
	}
	return info
}

// KVStats reports the key/value memory: blocks in use and free, bytes. When the
// sliding layers keep their own books, the blocks are the global layers' (which every
// position takes, so they bound what fits) and the bytes are both pools'.
func (m *Model) KVStats() kvcache.Stats {
	st := m.kv.Stats()
	if m.slidingKV == nil {
		return st
	}
	o := m.slidingKV.Stats()
	st.InUseBytes, st.ResidentBytes, st.Budget = st.InUseBytes+o.InUseBytes, st.ResidentBytes+o.ResidentBytes, st.Budget+o.Budget
	return st
}

// KVPools reports each key/value pool: every layer's, or the global layers' and then
// the sliding layers' when these keep their own books.
func (m *Model) KVPools() []kvcache.Stats {
	pools := []kvcache.Stats{m.kv.Stats()}
	if m.slidingKV != nil {
		pools = append(pools, m.slidingKV.Stats())
	}
	return pools
}

// MinKVBudget is the smallest key/value budget whose pools hold one sequence of
// positions positions: the budget split as startCache splits it, each pool rounded
// down to whole blocks of its own block bytes, as the backend made them — the
// global layers' pool holding every position, the sliding layers' the most their
// books keep. What [Options.KVBudget] must be at least for a request at full context.
func (m *Model) MinKVBudget(positions int) int64 {
	first := m.kv.Stats()
	need := blocksOf(positions, first.BlockSize) * first.BlockBytes
	if m.slidingKV == nil {
		return need
	}
	second := m.slidingKV.Stats()
	needSliding := blocksOf(min(positions, m.cfg.slidingHeld()), second.BlockSize) * second.BlockBytes
	holds := func(budget int64) bool {
		_, _, g := m.cfg.splitKV(budget)
		return g >= need && budget-g >= needSliding
	}
	hi := need + needSliding
	for !holds(hi) {
		hi *= 2
	}
	// The first pool's share only grows with the budget, so holds is monotone.
	return need + int64(sort.Search(int(hi-need), func(i int) bool { return holds(need + int64(i)) }))
}

// blocksOf is the blocks of size positions each that positions positions take.
func blocksOf(positions, size int) int64 { return int64((positions + size - 1) / size) }

// WeightFootprint is where the weights lie, as the backend took them in: every
// matrix (the norms' vectors, a few KiB, are left out), the embedding once when the
// output shares it.
func (m *Model) WeightFootprint() backend.Footprint {
	f := backend.FootprintOf(m.embed)
	if m.output != m.embed {
		f = f.Add(backend.FootprintOf(m.output))
	}
	if m.fcEmbed != nil {
		f = f.Add(backend.FootprintOf(m.fcEmbed)).Add(backend.FootprintOf(m.fcHidden))
	}
	if m.e3 != nil {
		f = f.Add(backend.FootprintOf(m.e3.fc)).Add(backend.FootprintOf(m.e3.qkvHidden))
	}
	for _, ly := range m.layers {
		for _, w := range []backend.Matrix{ly.qkv, ly.o, ly.gateUp, ly.down} {
			f = f.Add(backend.FootprintOf(w))
		}
	}
	return f
}

// ScratchBytes is the host memory of the buffers one forward pass of rows rows,
// outputs of them giving logits, holds on the CPU backend (see [Config.PassBytes]).
func (m *Model) ScratchBytes(rows, outputs int) int64 { return m.cfg.PassBytes(rows, outputs) }

// KVOnDevice reports whether the key/value memory lies on a device (it does where
// the weights do: a GPU backend allocates both at load) rather than on the Go heap,
// where the CPU backend allocates each block when it is first written.
func (m *Model) KVOnDevice() bool { return backend.FootprintOf(m.embed).Device > 0 }

// BackendName names what runs the model ("cpu avx512 vnni", "cuda NVIDIA H200", …).
func (m *Model) BackendName() string { return m.be.Name() }

// Backend is the backend the model runs on, for the drafters that compute beside it
// with matrices of their own (a trained head: heads.Options.Backend), so that they
// run where the model does — on its device, on the CPU on its threads. It stays the
// model's: the model's Close closes it, and with it what was taken into it, so those
// drafters must be closed first.
func (m *Model) Backend() backend.Backend { return m.be }

// WeightBytes is the memory the weights take in the backend.
func (m *Model) WeightBytes() int64 {
	n := m.embed.Bytes()
	if m.output != m.embed {
		n += m.output.Bytes()
	}
	return n + m.layerBytes()
}

// layerBytes is the memory of the layers' matrices and of an EAGLE layer's input
// product.
func (m *Model) layerBytes() int64 {
	var n int64
	if m.fcEmbed != nil {
		n += m.fcEmbed.Bytes() + m.fcHidden.Bytes()
	}
	if m.e3 != nil {
		n += m.e3.fc.Bytes() + m.e3.qkvHidden.Bytes()
	}
	for _, ly := range m.layers {
		n += ly.qkv.Bytes() + ly.o.Bytes() + ly.gateUp.Bytes() + ly.down.Bytes()
	}
	return n
}

// Close releases the model's backend. Sequences must be closed first; afterwards the
// model's calls fail with [ErrModelClosed].
func (m *Model) Close() error {
	if m.be == nil || m.closed.Swap(true) {
		return nil
	}
	return m.be.Close()
}

// ErrModelClosed is returned (wrapped) when a closed model, or a sequence of one, is
// used.
var ErrModelClosed = errors.New("llama: model is closed")

// errNoBackend is the error of a nil backend factory.
var errNoBackend = errors.New("no backend: the model runs on the backend it is given; " +
	"pass cpu.Factory(0) (package backend/cpu) to run it on the CPU, or gpu.Factory for a GPU")

// newBackend makes the backend of a model of c's shape with factory f.
func newBackend(c *Config, f backend.Factory) (backend.Backend, error) {
	if f == nil {
		return nil, errNoBackend
	}
	be, err := f(c.Shape())
	if err == nil && be == nil {
		err = errors.New("the backend factory made no backend")
	}
	return be, err
}

// startCache makes the key/value cache within the options' budget: one pool, or —
// when sliding layers sit beside global ones — the global layers' and the sliding
// layers', the budget shared as a sequence at full context needs it (see
// [Config.kvLayers]).
func (m *Model) startCache(opts Options) error {
	budget := opts.KVBudget
	if budget <= 0 {
		budget = m.cfg.KVBudget(opts.Sequences)
	}
	global, sliding, first := m.cfg.splitKV(budget)
	m.slidesAll = m.cfg.SlidingWindow > 0 && global == nil
	if sliding == nil {
		return m.pool(&m.kv, backend.KVSpec{Budget: budget})
	}
	if err := m.pool(&m.kv, backend.KVSpec{Budget: first, Layers: global}); err != nil {
		return err
	}
	return m.pool(&m.slidingKV, backend.KVSpec{Budget: budget - first, Layers: sliding, Sliding: true})
}

// pool makes one key/value pool of the backend in *dst.
func (m *Model) pool(dst **kvcache.Pool, s backend.KVSpec) error {
	s.BlockSize = kvcache.DefaultBlockSize
	p, err := m.be.KV(s)
	if err != nil {
		return fmt.Errorf("key/value cache: %w", err)
	}
	*dst = p
	return nil
}

// NewSequence implements [model.Model].
func (m *Model) NewSequence(ctx context.Context) (model.Sequence, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("llama: new sequence: %w", err)
	}
	if m.closed.Load() {
		return nil, ErrModelClosed
	}
	s := &sequence{m: m, kv: m.kv.NewSeq()}
	if m.slidingKV != nil {
		s.sliding = m.slidingKV.NewSeq()
	}
	return s, nil
}
