// Package specula is speculative decoding for Go services: open a target model and a
// drafter from their files in one call, and get the target's own text, faster.
//
//	eng, err := specula.Open(specula.Config{
//		Model: "models/gocoder-m-q8_0.gguf",
//		Draft: "model:models/gocoder-xs-q8_0.gguf", // prompt lookup goes in front of it
//	})
//	if err != nil { … }
//	defer eng.Close()
//	for ev, err := range eng.Generate(ctx, specula.Request{Prompt: "func main() {", Params: specula.Params{MaxTokens: 64}}) {
//		if err != nil { … }
//		fmt.Print(ev.Text)
//	}
//
// The zero values of [Config] are the good defaults: adaptive speculation of up to
// [DefaultMaxK] tokens a step, prompt lookup in front of a draft model, every core,
// a key/value budget sized for [Config.MaxSequences] requests at full context. An
// [Engine] is safe for concurrent use: requests running at once share the target's
// forward passes, and wait their turn and their key/value memory when it is full
// ([Serving]).
//
// An engine has one door: a [Request] — text, token ids or a conversation; sampling,
// N choices, log-probabilities, echo, an output [Format], stops — goes in through
// [Engine.GenerateFunc] or [Engine.Generate], and [Event]s come out. The engine owns
// what lies between: checking, encoding, admission, the choice of decoder, stops and
// detokenizing. [Engine.Complete], [Engine.Stream], [Engine.Chat] and [Engine.Score]
// are conveniences over it. Its errors are values a service maps to answers
// ([ErrInvalidParameter], [ErrPromptTooLong], [ErrOverloaded], …), and its
// [Engine.Metrics] a Prometheus collector. The lower-level [spec.Decoder] is there
// too ([Engine.Decoder]).
//
// The target runs on the CPU unless [Config.Backend] names another (package gpu's
// for a GPU: only a program that imports that package carries the CUDA loader).
// [NewEngine] serves any [model.Model] (a model of one's own) the same way; package
// server serves engines over HTTP with OpenAI's API.
package specula

import (
	"cmp"
	"errors"
	"fmt"
	"os"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/model"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/spec"
	"github.com/specula/specula/tokenizer"
)

// DefaultMaxK is the most tokens an adaptive engine drafts a step.
const DefaultMaxK = 8

// seededK is the fixed K of the decoder that serves reproducible sampling under
// adaptive speculation (see [Params.Reproducible]): a fixed draft length keeps the
// random draws, and so the text, the same from run to run.
const seededK = 2

// Config says what [Open] loads. The zero value of a field is its default.
type Config struct {
	// Model is the target: a GGUF file or a Hugging Face directory, with its tokenizer
	// inside. It is required.
	Model string
	// Draft is what drafts, its kind named: "" or "ngram" for prompt lookup alone
	// (free, and good wherever the output repeats its context); "suffix" for a suffix
	// tree over the request and earlier ones; "none" for plain decoding;
	// "model:PATH" for a draft model, a GGUF file or Hugging Face directory that
	// shares the target's tokenizer; "eagle:DIR", "medusa:DIR" or "mlp:DIR" for a
	// trained head made for the target (an EAGLE layer, Medusa heads, an
	// MLPSpeculator). A path without a kind is what its files say it is
	// (heads.Detect): a GGUF file or a model's directory is a draft model, a head's
	// directory that head; a path that does not hold the kind named is refused,
	// saying what it holds. Several, joined by "+", are asked in that order each step
	// ("suffix+model:models/xs.gguf"). A draft model or head gets prompt lookup in
	// front unless NoLookup is set. "forced", first, puts the tokens a Format forces
	// in front of the rest ([draft.Forced]: "forced+model:models/xs.gguf"; "forced"
	// alone drafts those only): they cost nothing and are always accepted, and a
	// request without a Format drafts with the rest alone.
	Draft string
	// NoLookup leaves out the prompt lookup that goes in front of a draft model or
	// head.
	NoLookup bool
	// Tree, for a Medusa or EAGLE head, drafts trees of this shape (K is then the
	// node budget); zero drafts chains.
	Tree draft.TreeShape
	// K is the most tokens drafted a step (0: DefaultMaxK); the engine chooses each
	// step how many pay, 0 included, unless FixedK is set.
	K int
	// FixedK drafts exactly K tokens every step.
	FixedK bool
	// MinK, for an adaptive engine, is the fewest tokens a step that drafts drafts
	// (llama-server's --draft-min); it may still decode a step plainly.
	MinK int
	// DraftPMin is the confidence stop of the drafters that report their confidence
	// (draft models and the heads' chains; llama-server's --draft-p-min): a chain
	// ends after its first token whose draft probability is below it. 0, the
	// default, stops no chain; a value in (0, 1] is the threshold;
	// [spec.PMinLearned] learns it per drafter with the adaptive K (and stops no
	// chain with FixedK). See [spec.Options.DraftPMin].
	DraftPMin float64
	// Threads is the number of CPU threads (0: GOMAXPROCS) of the engine's one pool,
	// which every model it runs on the CPU shares: the target's when Backend is nil
	// (and so its heads'), a draft model's, an EAGLE layer's.
	Threads int
	// ContextLength, when positive, lowers the model's context length.
	ContextLength int
	// KVBudget is the target's key/value cache budget in bytes. 0 sizes it for
	// MaxSequences sequences at full context by the one rule of
	// [llama.Config.KVBudget] (at least 64 MiB, at most 4 GiB). On the CPU memory is
	// used only as sequences grow; a GPU sets it aside at load.
	KVBudget int64
	// MaxSequences is how many requests the default KV budget is sized for (0: 4 ×
	// GOMAXPROCS).
	MaxSequences int
	// Backend makes what runs the target; nil runs it on the CPU (backend/cpu, with
	// Threads threads). For a GPU, open a device with package gpu and pass
	// gpu.Factory(dev, gpu.BackendOptions{}): that package loads the CUDA libraries
	// at run time, so only programs that import it carry the loader. A trained head
	// computes on the target's backend (an EAGLE layer on one this factory makes);
	// draft models run on the CPU.
	Backend backend.Factory
	// ChatTemplate, when set, is the Jinja chat template to use instead of the
	// model's own.
	ChatTemplate string
	// Progress, when set, is told how far the reading of each model file is.
	Progress func(file string, done, total int64)
	// Serving sets how many requests run at once and wait, and when speculation
	// gives way under load.
	Serving
}

// Open loads the target, its tokenizer and chat template, and the drafter that cfg
// names, and returns the engine on them. A draft model whose tokenizer is not the
// target's is refused, saying how they differ.
func Open(cfg Config) (*Engine, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	e := &Engine{}
	if err := e.open(cfg); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// open loads what cfg names into e.
func (e *Engine) open(cfg Config) error {
	if err := e.openTarget(cfg); err != nil {
		return err
	}
	e.loadChatTemplate(cfg)
	drafter, err := e.openDrafter(cfg)
	if err != nil {
		return err
	}
	return e.start(drafter, decoding{k: cfg.K, minK: cfg.MinK, pmin: cfg.DraftPMin, fixed: cfg.FixedK, serving: cfg.Serving, seqs: cfg.MaxSequences})
}

// NewEngine returns an engine on a target model of any kind and its tokenizer,
// drafting with drafter (nil: plain decoding). The engine does not close m or the
// drafter.
func NewEngine(m model.Model, tok *tokenizer.Tokenizer, drafter draft.Drafter, opts EngineOptions) (*Engine, error) {
	if m == nil || tok == nil {
		return nil, errors.New("specula: NewEngine needs a model and its tokenizer")
	}
	if err := checkK("", opts.K, opts.MinK); err != nil {
		return nil, err
	}
	if err := checkPMin("", opts.DraftPMin); err != nil {
		return nil, err
	}
	e := &Engine{model: m, info: m.Info(), tok: tok, chat: opts.ChatTemplate}
	if err := e.start(drafter, decoding{k: opts.K, minK: opts.MinK, pmin: opts.DraftPMin, fixed: opts.FixedK, serving: opts.Serving}); err != nil {
		return nil, err
	}
	return e, nil
}

// check refuses impossible settings before anything is read, each as a
// *ParameterError naming the field.
func (c Config) check() error {
	if c.Model == "" {
		return invalid("Config.Model", "is required: a GGUF file or a Hugging Face directory")
	}
	if err := checkK("Config.", c.K, c.MinK); err != nil {
		return err
	}
	if err := checkPMin("Config.", c.DraftPMin); err != nil {
		return err
	}
	for _, n := range []struct {
		field string
		v     int64
	}{{"Threads", int64(c.Threads)}, {"ContextLength", int64(c.ContextLength)}, {"KVBudget", c.KVBudget}, {"MaxSequences", int64(c.MaxSequences)}} {
		if n.v < 0 {
			return invalid("Config."+n.field, "%d is negative", n.v)
		}
	}
	if _, err := os.Stat(c.Model); err != nil {
		return &ParameterError{Field: "Config.Model", Err: err}
	}
	return nil
}

// checkK refuses a K or MinK out of range, naming the field after prefix ("Config."
// for Open's, "" for NewEngine's options).
func checkK(prefix string, k, minK int) error {
	switch {
	case k < 0 || k > spec.MaxK:
		return invalid(prefix+"K", "%d: want 0 (the default, %d) to %d", k, DefaultMaxK, spec.MaxK)
	case minK < 0 || minK > cmp.Or(k, DefaultMaxK):
		return invalid(prefix+"MinK", "%d: want 0 to K (%d)", minK, cmp.Or(k, DefaultMaxK))
	}
	return nil
}

// checkPMin refuses a DraftPMin that is neither 0, a threshold up to 1, nor
// spec.PMinLearned, naming the field after prefix.
func checkPMin(prefix string, p float64) error {
	if !(p >= 0 && p <= 1) && p != spec.PMinLearned {
		return invalid(prefix+"DraftPMin", "%v: want 0 (off), a threshold up to 1, or spec.PMinLearned (%d)", p, spec.PMinLearned)
	}
	return nil
}

// openTarget opens the target model and its tokenizer.
func (e *Engine) openTarget(cfg Config) error {
	m, err := openModel(cfg.Model, e.targetBackend(cfg), targetOptions(cfg), cfg.Progress)
	if err != nil {
		return err
	}
	e.closers = append(e.closers, m)
	e.model, e.info, e.path = m, m.Info(), cfg.Model
	if e.tok, err = tokenizer.Load(cfg.Model); err != nil {
		return fmt.Errorf("specula: %w", err)
	}
	return nil
}

// targetBackend returns the factory of the target's backend, and of what runs beside
// it on its device (an EAGLE layer): the configured one, else the CPU's.
func (e *Engine) targetBackend(cfg Config) backend.Factory {
	if cfg.Backend != nil {
		return cfg.Backend
	}
	return e.cpuBackend(cfg)
}

// cpuBackend returns the factory of CPU backends on the engine's one pool of
// threads, started by the first call (and closed by Close after every backend on
// it, which are opened after it).
func (e *Engine) cpuBackend(cfg Config) backend.Factory {
	if e.pool == nil {
		e.pool = cpu.NewPool(cfg.Threads)
		e.closers = append(e.closers, e.pool)
	}
	return e.pool.Factory()
}

// targetOptions returns the target's load options: the KV budget, else the model's
// default for MaxSequences sequences.
func targetOptions(cfg Config) llama.Options {
	return llama.Options{KVBudget: cfg.KVBudget, Sequences: cfg.MaxSequences, ContextLength: cfg.ContextLength}
}

// openModel opens a GGUF file or Hugging Face directory on the backend b makes,
// reporting progress.
func openModel(path string, b backend.Factory, opts llama.Options, progress func(string, int64, int64)) (*llama.Model, error) {
	if progress != nil {
		opts.Progress = func(done, total int64) { progress(path, done, total) }
	}
	m, err := llama.Open(path, b, opts)
	if err != nil {
		return nil, fmt.Errorf("specula: loading %s: %w", path, err)
	}
	return m, nil
}

// loadChatTemplate compiles the configured chat template, or else the model's own.
// A template that does not compile is no error: completions still work, and Chat
// says why it cannot.
func (e *Engine) loadChatTemplate(cfg Config) {
	src, source := cfg.ChatTemplate, "Config.ChatTemplate"
	if src == "" {
		var err error
		if src, source, err = ReadChatTemplate(cfg.Model); err != nil {
			e.chatErr = fmt.Errorf("reading the chat template: %w", err)
			return
		}
	}
	if src == "" {
		return
	}
	var bos, eos string
	if id, ok := e.tok.BOS(); ok {
		bos = e.tok.Decode([]int32{id})
	}
	if ids := e.tok.EOS(); len(ids) > 0 {
		eos = e.tok.Decode(ids[:1])
	}
	e.chat, e.chatErr = NewChatTemplate(src, source, bos, eos)
}
