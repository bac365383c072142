// Package heads opens a trained draft head from its directory, whatever its kind —
// MLPSpeculator, Medusa (package draft) or an EAGLE layer (run by model/llama) — for a
// target loaded from targetPath: what a program given "a head directory" as its
// drafter needs.
package heads

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/model"
	"github.com/specula/specula/model/llama"
)

// Kind is what a head directory holds, by its config.json: "mlp_speculator", "medusa"
// or "eagle" (model_type llama or eagle: a Llama layer, which llama.OpenEAGLE checks
// for its fc.weight).
func Kind(dir string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return "", fmt.Errorf("heads: %w", err)
	}
	var c struct {
		ModelType string `json:"model_type"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return "", fmt.Errorf("heads: %s: %w", filepath.Join(dir, "config.json"), err)
	}
	switch c.ModelType {
	case "mlp_speculator", "medusa":
		return c.ModelType, nil
	case "llama", "eagle":
		return "eagle", nil
	}
	return "", fmt.Errorf("heads: %s: model_type %q is not a draft head (mlp_speculator, medusa, or an EAGLE llama layer)", dir, c.ModelType)
}

// Options tune an opened head.
type Options struct {
	// Threads is how many threads the head's products use (an EAGLE layer's too,
	// unless Layer sets its backend); 0 means GOMAXPROCS.
	Threads int
	// Tree, for Medusa and EAGLE, makes the head draft trees of this shape; zero
	// drafts chains (MLPSpeculator always does).
	Tree draft.TreeShape
	// Requantize, when set (Q8_0), converts the head's float matrices to that type
	// at load (an EAGLE layer's too): half the bytes to read per drafted token.
	Requantize dtype.DType
	// Layer are the options of an EAGLE layer's model (its backend, budget); its
	// backend is the CPU's on Threads threads, and its context length the target's,
	// unless set.
	Layer llama.Options
}

// Open opens the head in dir for the target described by target, loaded from
// targetPath (an EAGLE layer shares the target's embeddings). The returned closer
// releases the head's memory and threads, after its sessions are closed.
func Open(dir, targetPath string, target model.Info, opts Options) (draft.Drafter, io.Closer, error) {
	kind, err := Kind(dir)
	if err != nil {
		return nil, nil, err
	}
	ho := draft.HeadOptions{Threads: opts.Threads, Tree: opts.Tree, Requantize: opts.Requantize}
	if opts.Requantize != 0 {
		opts.Layer.Requantize = opts.Requantize
	}
	switch kind {
	case "mlp_speculator":
		if opts.Tree != (draft.TreeShape{}) {
			return nil, nil, errors.New("heads: an MLPSpeculator drafts chains; it takes no tree shape")
		}
		h, err := draft.OpenMLPSpeculator(dir, target, ho)
		if err != nil {
			return nil, nil, err
		}
		return h, h, nil
	case "medusa":
		h, err := draft.OpenMedusa(dir, target, ho)
		if err != nil {
			return nil, nil, err
		}
		return h, h, nil
	}
	if opts.Layer.Backend == nil {
		opts.Layer.Backend = cpu.Factory(opts.Threads)
	}
	if opts.Layer.ContextLength == 0 {
		opts.Layer.ContextLength = target.ContextLength
	}
	layer, err := llama.OpenEAGLE(dir, targetPath, opts.Layer)
	if err != nil {
		return nil, nil, err
	}
	e, err := draft.NewEAGLE(layer, target, opts.Tree)
	if err != nil {
		_ = layer.Close()
		return nil, nil, err
	}
	return e, layer, nil
}
