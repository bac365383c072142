package specula

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/heads"
	"github.com/specula/specula/draft/lookup"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/tokenizer"
)

// draftPart is one drafter that Config.Draft names: prompt lookup or suffix drafting
// by its name, or a model or head by its kind and path.
type draftPart struct {
	name string     // "ngram" or "suffix"; "" for a model or head
	kind heads.Kind // a model's or head's
	path string
}

// learned reports whether the part is a model or a head: what prompt lookup goes in
// front of.
func (p draftPart) learned() bool { return p.name == "" }

// parseDraft reads Config.Draft (see there) and checks what each path holds, before
// anything is loaded.
func parseDraft(s string) ([]draftPart, error) {
	var parts []draftPart
	for i, p := range strings.Split(s, "+") {
		switch p = strings.TrimSpace(p); p {
		case "forced":
			if i > 0 {
				return nil, &ParameterError{Field: "Config.Draft", Err: fmt.Errorf("%q: forced goes first: it drafts in front of the rest", s)}
			}
			parts = append(parts, draftPart{name: "forced"})
		case "", "ngram", "lookup":
			parts = append(parts, draftPart{name: "ngram"})
		case "suffix":
			parts = append(parts, draftPart{name: "suffix"})
		case "none":
		default:
			kind, path, err := heads.Resolve(p)
			if errors.Is(err, fs.ErrNotExist) {
				return nil, &ParameterError{Field: "Config.Draft", Err: fmt.Errorf("%q: not ngram, suffix, forced, none or KIND:PATH (KIND model, eagle, eagle3, medusa or mlp), and not a file: %w", p, err)}
			}
			if err != nil {
				return nil, &ParameterError{Field: "Config.Draft", Err: fmt.Errorf("%q: %w", p, err)}
			}
			parts = append(parts, draftPart{kind: kind, path: path})
		}
	}
	return parts, nil
}

// openDrafter opens what cfg.Draft names, each part in turn, with prompt lookup in
// front of a model or head unless cfg.NoLookup, and the forced tokens in front of
// everything when it begins with forced: nil for plain decoding.
func (e *Engine) openDrafter(cfg Config) (draft.Drafter, error) {
	parts, err := parseDraft(cfg.Draft)
	if err != nil {
		return nil, err
	}
	if len(parts) > 0 && parts[0].name == "forced" {
		then, err := e.openDrafters(cfg, parts[1:])
		if err != nil {
			return nil, err
		}
		return draft.Forced{Then: then}, nil
	}
	return e.openDrafters(cfg, parts)
}

// openDrafters opens parts in turn, with prompt lookup in front of a model or head
// unless cfg.NoLookup: nil when there are none.
func (e *Engine) openDrafters(cfg Config, parts []draftPart) (draft.Drafter, error) {
	o := opener{e: e, cfg: cfg}
	var ds []draft.Drafter
	learned := false
	for _, p := range parts {
		d, err := o.open(p)
		if err != nil {
			return nil, err
		}
		ds = append(ds, d)
		learned = learned || p.learned()
	}
	switch {
	case learned && !cfg.NoLookup:
		return lookup.InFront(ds...), nil
	case len(ds) == 0:
		return nil, nil
	case len(ds) == 1:
		return ds[0], nil
	}
	return draft.First(ds...), nil
}

// opener opens the drafters of one engine.
type opener struct {
	e   *Engine
	cfg Config
}

// open opens one drafter of Config.Draft.
func (o *opener) open(p draftPart) (draft.Drafter, error) {
	switch {
	case p.name == "ngram":
		return lookup.NGram{}, nil
	case p.name == "suffix":
		return lookup.Suffix{Memory: lookup.NewSuffixMemory(1<<20, 32)}, nil
	case p.kind == heads.KindModel:
		return o.model(p.path)
	}
	return o.head(p.path)
}

// backendLender is a model that lends its backend to the drafters that compute beside
// it (*llama.Model).
type backendLender interface {
	Backend() backend.Backend
}

// head opens a trained head, computing on the target's backend.
func (o *opener) head(dir string) (draft.Drafter, error) {
	tm, ok := o.e.model.(backendLender)
	if !ok {
		return nil, fmt.Errorf("specula: draft head %s: the target lends no backend for a head to compute on", dir)
	}
	// Q8_0 heads: half the bytes per drafted token; the output stays the target's.
	opts := heads.Options{Backend: tm.Backend(), Requantize: dtype.Q8_0, Tree: o.cfg.Tree, OpenEAGLE: o.eagle}
	h, closer, err := heads.Open(dir, o.e.info, opts)
	if err != nil {
		return nil, fmt.Errorf("specula: draft head %s: %w", dir, err)
	}
	o.e.closers = append(o.e.closers, closer)
	return h, nil
}

// eagle loads an EAGLE layer for the target, sharing its embeddings: on a backend of
// the target's factory (its device; on the CPU the engine's threads), with the
// target's context length, in Q8_0 as the other heads.
func (o *opener) eagle(dir string) (heads.Layer, error) {
	opts := llama.Options{ContextLength: cmp.Or(o.cfg.ContextLength, o.e.info.ContextLength), Requantize: dtype.Q8_0}
	return llama.OpenEAGLE(dir, o.cfg.Model, o.e.targetBackend(o.cfg), opts)
}

// model opens a draft model, which must share the target's tokenizer.
func (o *opener) model(path string) (draft.Drafter, error) {
	e, cfg := o.e, o.cfg
	// The draft model's cache keeps the runtime's default budget: it is small.
	dm, err := openModel(path, e.cpuBackend(cfg), llama.Options{ContextLength: cfg.ContextLength}, cfg.Progress)
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, dm)
	e.drafts = append(e.drafts, dm)
	dtok, err := tokenizer.Load(path)
	if err != nil {
		return nil, fmt.Errorf("specula: %w", err)
	}
	if err := tokenizer.Compatible(dtok, e.tok); err != nil {
		return nil, fmt.Errorf("specula: the draft model %s cannot draft for %s: %w", path, cfg.Model, err)
	}
	sm, err := draft.NewSmallModel(dm)
	if err != nil {
		return nil, fmt.Errorf("specula: %w", err)
	}
	return sm, nil
}
