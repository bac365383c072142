package specula

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/kvcache"
	"github.com/specula/specula/model"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
	"github.com/specula/specula/tokenizer"
)

// Engine is a target model with its tokenizer, chat template and drafter, and the
// decoders on them: the one door requests come in by ([Engine.GenerateFunc] and
// what is built on it). It is safe for concurrent use: requests running at once
// share the target's forward passes, and wait their turn when the engine is full.
// Close it when done.
type Engine struct {
	model   model.Model
	path    string // the target's file, when Open loaded it
	local   *target.Local
	tok     *tokenizer.Tokenizer
	info    model.Info
	chat    *ChatTemplate
	chatErr error // why the model's template is not usable

	dec, plain, seeded *spec.Decoder
	maxK               int
	saturation         int
	drafts             []model.Model // draft models, for their memory figures
	// closers are what the engine opened, in order: Close closes them the other way
	// round, so that a drafter closes before the target it computes on and the CPU
	// threads (pool) after every backend on them.
	closers []io.Closer
	pool    *cpu.Pool // the one pool of CPU threads of every backend the engine made; nil: none yet

	adm         *admission
	met         *metrics
	constraints constraintCache // the compiled output constraints of Formats

	ctx    context.Context // ends every request when the engine closes
	cancel context.CancelCauseFunc
}

// EngineOptions tune [NewEngine]: the settings of [Config] that do not say what to
// load (the caller brings the model, its tokenizer and the drafter).
type EngineOptions struct {
	// K, FixedK, MinK and DraftPMin are as in [Config].
	K         int
	FixedK    bool
	MinK      int
	DraftPMin float64
	// ChatTemplate renders chats (nil: the engine has none, and Chat fails).
	ChatTemplate *ChatTemplate
	// Serving sets how many requests run and wait (see [Config]).
	Serving
}

// decoding says how an engine decodes: the most tokens drafted a step, the fewest
// when drafting, whether that is fixed, and how requests are served.
type decoding struct {
	k, minK int
	pmin    float64 // Config.DraftPMin
	fixed   bool
	serving Serving
	seqs    int // Config.MaxSequences
}

// start makes the engine's decoders, drafting with drafter (nil: plain decoding), and
// its admission and metrics: the last step of Open and NewEngine.
func (e *Engine) start(drafter draft.Drafter, d decoding) error {
	if err := d.serving.check(); err != nil {
		return err
	}
	e.ctx, e.cancel = context.WithCancelCause(context.Background())
	if err := e.makeDecoders(drafter, d.k, d.minK, d.pmin, d.fixed); err != nil {
		return err
	}
	capacity, blockSize := 0, 0
	if kv, _ := e.kvStats(); kv != nil {
		capacity, blockSize = kv.Blocks, kv.BlockSize
	}
	running := d.seqs
	if running == 0 {
		running = llama.DefaultSequences()
	}
	e.saturation = d.serving.Saturation
	e.adm = newAdmission(d.serving, running, capacity, blockSize)
	if err := e.Memory().check(e.minKVBudget()); err != nil {
		return err
	}
	e.met = newMetrics(e)
	return nil
}

// makeDecoders makes the plain decoder and, with a drafter, the speculative one
// drafting up to k tokens a step (adaptive unless fixed; pmin is Config.DraftPMin) and
// the reproducible one.
func (e *Engine) makeDecoders(drafter draft.Drafter, k, minK int, pmin float64, fixed bool) error {
	tgt, err := target.NewLocal(e.model)
	if err != nil {
		return fmt.Errorf("specula: %w", err)
	}
	e.local = tgt
	if e.plain, err = spec.New(tgt, nil, spec.Options{}); err != nil {
		return err
	}
	e.dec, e.seeded = e.plain, e.plain
	if drafter == nil {
		return nil
	}
	if k == 0 {
		k = DefaultMaxK
	}
	// The tokenizers were checked: a smaller draft vocabulary is the target's, padded.
	if e.dec, err = spec.New(tgt, drafter, spec.Options{K: k, MinK: minK, Adaptive: !fixed, PaddedVocab: true, DraftPMin: pmin}); err != nil {
		return err
	}
	e.maxK, e.seeded = k, e.dec
	if !fixed {
		if e.seeded, err = spec.New(tgt, drafter, spec.Options{K: min(k, seededK), PaddedVocab: true}); err != nil {
			return err
		}
	}
	return nil
}

// Close ends the engine: requests waiting are refused and running ones cancelled,
// with ErrClosed; once they have ended, what Open loaded is released, the last
// loaded first (the drafters before the target, the CPU threads last). Later
// requests fail with ErrClosed.
func (e *Engine) Close() error {
	if e.cancel != nil {
		e.cancel(ErrClosed)
	}
	if e.adm != nil {
		e.adm.close()
	}
	var errs []error
	for _, c := range slices.Backward(e.closers) {
		errs = append(errs, c.Close())
	}
	e.closers, e.pool = nil, nil
	return errors.Join(errs...)
}

// Info describes the target model.
func (e *Engine) Info() model.Info { return e.info }

// Tokenizer returns the target's tokenizer.
func (e *Engine) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// Decoder returns the engine's speculative decoder (plain when there is no drafter),
// for callers that drive the lower-level [spec.Decoder] themselves. Requests made
// there bypass the engine's admission, metrics and stops: prefer [Engine.Generate].
func (e *Engine) Decoder() *spec.Decoder { return e.dec }

// Path is the target's file or directory ("" for an engine made by NewEngine).
func (e *Engine) Path() string { return e.path }

// ChatTemplate returns the chat template, or nil and why there is none usable.
func (e *Engine) ChatTemplate() (*ChatTemplate, error) { return e.chat, e.chatErr }

// speculates is the saturation policy: with running requests (a new one included),
// speculate unless the engine has no drafter or running is above the saturation
// point, if there is one.
func (e *Engine) speculates(running int) bool {
	return e.maxK > 0 && (e.saturation == 0 || running <= e.saturation)
}

// Status is what an engine is doing now.
type Status struct {
	// Running and Waiting count the requests decoding and waiting for their turn.
	Running, Waiting int
	// KVUsage is the fraction of the target's key/value cache blocks in use, which a
	// new request cannot have: blocks that only keep a cached prefix count as free
	// (0 when the model does not say).
	KVUsage float64
	// PrefixCacheUsage is the fraction of its blocks that keep a cached prefix no
	// request holds: free, and reused on a prefix hit.
	PrefixCacheUsage float64
	// Speculating reports whether a request admitted now would draft.
	Speculating bool
}

// Status reports what the engine is doing now.
func (e *Engine) Status() Status {
	running, waiting := e.adm.counts()
	t, _ := e.kvStats()
	return Status{Running: running, Waiting: waiting, KVUsage: kvUsage(t), PrefixCacheUsage: prefixCacheUsage(t),
		Speculating: e.speculates(running + 1)}
}

// kvStater is a model that reports its key/value cache (the Llama runtime).
type kvStater interface {
	KVStats() kvcache.Stats
}

// kvStats reports the key/value caches of the target and the first draft model;
// nil where a model does not report one.
func (e *Engine) kvStats() (target, draft *kvcache.Stats) {
	if m, ok := e.model.(kvStater); ok {
		s := m.KVStats()
		target = &s
	}
	if len(e.drafts) > 0 {
		if m, ok := e.drafts[0].(kvStater); ok {
			s := m.KVStats()
			draft = &s
		}
	}
	return target, draft
}

// weightBytes is implemented by what holds weights: models and draft heads.
type weightBytes interface {
	WeightBytes() int64
}
