package specula

import (
	"fmt"
	"os"
	"strings"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/draft/heads"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/model/llama"
	"github.com/specula/specula/tokenizer"
)

// openDrafter opens what cfg.Draft names, each part in turn: nil for plain decoding.
func (e *Engine) openDrafter(cfg Config) (draft.Drafter, error) {
	var parts []draft.Drafter
	learned := false // a model or head is among them
	for _, name := range strings.Split(cfg.Draft, "+") {
		d, isModel, err := e.openPart(strings.TrimSpace(name), cfg)
		if err != nil {
			return nil, err
		}
		if d != nil {
			parts = append(parts, d)
		}
		learned = learned || isModel
	}
	if learned && !cfg.NoLookup && !hasLookup(parts) {
		parts = append([]draft.Drafter{draft.NGram{Min: 2}}, parts...)
	}
	switch len(parts) {
	case 0:
		return nil, nil
	case 1:
		return parts[0], nil
	}
	return draft.First(parts...), nil
}

func hasLookup(ds []draft.Drafter) bool {
	for _, d := range ds {
		if _, ok := d.(draft.NGram); ok {
			return true
		}
	}
	return false
}

// openPart opens one drafter of Config.Draft and reports whether it is a model or a
// head (which lookup goes in front of).
func (e *Engine) openPart(name string, cfg Config) (d draft.Drafter, isModel bool, err error) {
	switch name {
	case "", "ngram", "lookup":
		return draft.NGram{}, false, nil
	case "suffix":
		return draft.Suffix{Memory: draft.NewSuffixMemory(1<<20, 32)}, false, nil
	case "none":
		return nil, false, nil
	}
	if _, err := os.Stat(name); err != nil {
		return nil, false, fmt.Errorf("specula: Config.Draft %q: not ngram, suffix or none, and not a file: %w", name, err)
	}
	if _, err := heads.Kind(name); err == nil {
		// Q8_0 heads: half the bytes per drafted token; the output stays the target's.
		h, closer, err := heads.Open(name, cfg.Model, e.info, heads.Options{Threads: cfg.Threads, Requantize: dtype.Q8_0, Tree: cfg.Tree,
			Layer: llama.Options{Backend: cpu.Factory(cfg.Threads), ContextLength: cfg.ContextLength}})
		if err != nil {
			return nil, false, fmt.Errorf("specula: draft head %s: %w", name, err)
		}
		e.closers = append(e.closers, closer)
		return h, true, nil
	}
	// The draft model's cache keeps the runtime's default budget: it is small.
	dm, err := openModel(name, llama.Options{Backend: cpu.Factory(cfg.Threads), ContextLength: cfg.ContextLength}, cfg.Progress)
	if err != nil {
		return nil, false, err
	}
	e.closers = append(e.closers, dm)
	e.drafts = append(e.drafts, dm)
	dtok, err := tokenizer.Load(name)
	if err != nil {
		return nil, false, fmt.Errorf("specula: %w", err)
	}
	if err := tokenizer.Compatible(dtok, e.tok); err != nil {
		return nil, false, fmt.Errorf("specula: the draft model %s cannot draft for %s: %w", name, cfg.Model, err)
	}
	sm, err := draft.NewSmallModel(dm)
	if err != nil {
		return nil, false, fmt.Errorf("specula: %w", err)
	}
	return sm, true, nil
}
