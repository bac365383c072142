// Package heads holds the trained draft heads, which draft from the target's own
// hidden states and need no model of their own to read the context: IBM's
// MLPSpeculator ([OpenMLPSpeculator]), Medusa heads ([OpenMedusa]) and EAGLE layers
// ([NewEAGLE] on a layer that llama.OpenEAGLE loads), from checkpoints laid out as vLLM
// loads them. [Open] opens any of them from its directory, and [Detect] tells what a
// drafter's path holds — a head of one of these kinds, or a model — for programs
// given a path as their drafter.
//
// A head computes on the backend it is given, the target's ([Options].Backend): an
// MLPSpeculator's and Medusa's matrices live there and their products run there
// (backend.Backend's MulRows and EmbedRow), on the target's device, on the CPU on the
// engine's threads; an EAGLE layer is a model the caller loads on a backend of the
// target's factory. The package imports the contracts and the formats, no kernels
// and no backend of its own.
package heads

import (
	"errors"
	"fmt"
	"io"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/model"
)

// Options tune an opened head.
type Options struct {
	// Backend is where an MLPSpeculator's or Medusa heads' matrices live and their
	// products run: the target's (llama.Model.Backend), so that the head computes
	// where the target does. It stays the caller's; the head's matrices live in it
	// until the backend is closed, so the head must be closed (no longer used)
	// before the target. Required for those two kinds.
	Backend backend.Backend
	// Tree, for Medusa and EAGLE, makes the head draft trees of this shape; zero
	// drafts chains (MLPSpeculator always does).
	Tree draft.TreeShape
	// Requantize, when set (Q8_0), converts an MLPSpeculator's or Medusa heads' float
	// matrices to that type at load: half the bytes to read per drafted token. (An
	// EAGLE layer's is its loader's: llama.Options.Requantize.)
	Requantize dtype.DType
	// OpenEAGLE loads the EAGLE layer or EAGLE-3 head in a directory, for [Open]
	// given one (llama.OpenEAGLE loads both; an EAGLE-3 head is an [EAGLE3Layer]): the
	// caller's llama.OpenEAGLE with the target's file, whose embeddings the layer
	// shares, on a backend of the target's factory (its device; on the CPU its
	// threads) and with the target's context length, so that this package runs no
	// model of its own. Nil: Open refuses EAGLE layers.
	OpenEAGLE func(dir string) (Layer, error)
}

// Layer is an EAGLE layer as [Options].OpenEAGLE loads it: a model, closed by the
// closer [Open] returns.
type Layer interface {
	model.Model
	io.Closer
}

// Open opens the head in dir, whatever its kind ([Detect]), for the target described
// by target. The returned closer releases what the head holds of its own (an EAGLE
// layer), after its sessions are closed and before the target.
func Open(dir string, target model.Info, opts Options) (draft.Drafter, io.Closer, error) {
	kind, err := Detect(dir)
	if err != nil {
		return nil, nil, err
	}
	switch kind {
	case KindModel:
		return nil, nil, fmt.Errorf("heads: %s is %s, not a draft head: it drafts as a draft model", dir, kind.Describe())
	case KindMLP:
		if opts.Tree != (draft.TreeShape{}) {
			return nil, nil, errors.New("heads: an MLPSpeculator drafts chains; it takes no tree shape")
		}
		h, err := OpenMLPSpeculator(dir, target, opts)
		if err != nil {
			return nil, nil, err
		}
		return h, h, nil
	case KindMedusa:
		h, err := OpenMedusa(dir, target, opts)
		if err != nil {
			return nil, nil, err
		}
		return h, h, nil
	}
	return openEAGLE(dir, target, opts)
}

// openEAGLE loads the EAGLE layer in dir with opts.OpenEAGLE and drafts with it.
func openEAGLE(dir string, target model.Info, opts Options) (draft.Drafter, io.Closer, error) {
	if opts.OpenEAGLE == nil {
		return nil, nil, fmt.Errorf("heads: %s is %s, and Options.OpenEAGLE, which loads one, is not set", dir, KindEAGLE.Describe())
	}
	layer, err := opts.OpenEAGLE(dir)
	if err != nil {
		return nil, nil, err
	}
	if layer == nil {
		return nil, nil, fmt.Errorf("heads: Options.OpenEAGLE loaded no layer from %s", dir)
	}
	var d draft.Drafter
	if l3, ok := layer.(EAGLE3Layer); ok && l3.ProjectInputSize() > 0 {
		d, err = NewEAGLE3(l3, target, opts.Tree)
	} else {
		d, err = NewEAGLE(layer, target, opts.Tree)
	}
	if err != nil {
		_ = layer.Close()
		return nil, nil, err
	}
	return d, layer, nil
}
