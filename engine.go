package specula

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/specula/specula/draft"
	"github.com/specula/specula/kvcache"
	"github.com/specula/specula/model"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/target"
	"github.com/specula/specula/tokenizer"
)

// Engine is a target model with its tokenizer, chat template and drafter, and the
// decoders on them. It is safe for concurrent use. Close it when done.
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
	drafts             []model.Model // draft models, for their memory figures
	closers            []io.Closer   // the models and heads the engine opened

	formats  formats      // compiled output formats
	compiled atomic.Int64 // nanoseconds spent compiling them
}

// EngineOptions tune [NewEngine].
type EngineOptions struct {
	// K and FixedK are as in [Config].
	K      int
	FixedK bool
	// ChatTemplate renders chats (nil: the engine has none, and Chat fails).
	ChatTemplate *ChatTemplate
}

// makeDecoders makes the plain decoder and, with a drafter, the speculative one
// drafting up to k tokens a step (adaptive unless fixed) and the reproducible one.
func (e *Engine) makeDecoders(drafter draft.Drafter, k, minK int, fixed bool) error {
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
	if e.dec, err = spec.New(tgt, drafter, spec.Options{K: k, MinK: minK, Adaptive: !fixed, PaddedVocab: true}); err != nil {
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

// Close releases what Open loaded. Close it after every request has ended.
func (e *Engine) Close() error {
	var errs []error
	for _, c := range e.closers {
		errs = append(errs, c.Close())
	}
	e.closers = nil
	return errors.Join(errs...)
}

// Info describes the target model.
func (e *Engine) Info() model.Info { return e.info }

// Tokenizer returns the target's tokenizer.
func (e *Engine) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// Decoder returns the engine's decoder: speculative when there is a drafter, plain
// otherwise.
func (e *Engine) Decoder() *spec.Decoder { return e.dec }

// PlainDecoder returns a decoder without speculation on the same target.
func (e *Engine) PlainDecoder() *spec.Decoder { return e.plain }

// ReproducibleDecoder returns the decoder for sampling with a seed: the same seed
// gives the same text every time. An adaptive decoder's choice of K depends on timing,
// and its random draws with it, so this one drafts a fixed K (at most 2) with the
// same drafter; with a fixed K it is Decoder.
func (e *Engine) ReproducibleDecoder() *spec.Decoder { return e.seeded }

// MaxDraft is the most tokens the engine drafts a step (0: no speculation).
func (e *Engine) MaxDraft() int { return e.maxK }

// Target returns the target every decoder verifies through: its batch statistics and
// load.
func (e *Engine) Target() *target.Local { return e.local }

// Path is the target's file or directory ("" for an engine made by NewEngine).
func (e *Engine) Path() string { return e.path }

// Model returns the target model.
func (e *Engine) Model() model.Model { return e.model }

// ChatTemplate returns the chat template, or nil and why there is none usable.
func (e *Engine) ChatTemplate() (*ChatTemplate, error) { return e.chat, e.chatErr }

// kvStater is a model that reports its key/value cache (the Llama runtime).
type kvStater interface {
	KVStats() kvcache.Stats
}

// KVStats reports the key/value caches of the target and the first draft model;
// nil where a model does not report one.
func (e *Engine) KVStats() (target, draft *kvcache.Stats) {
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

// WeightBytes reports the bytes of the target's weights and of the drafters' (models
// and heads), where they say.
func (e *Engine) WeightBytes() (target, drafters int64) {
	if w, ok := e.model.(weightBytes); ok {
		target = w.WeightBytes()
	}
	for _, c := range e.closers {
		if w, ok := c.(weightBytes); ok && any(c) != any(e.model) {
			drafters += w.WeightBytes()
		}
	}
	return target, drafters
}
