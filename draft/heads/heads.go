// Package heads holds the trained draft heads, which draft from the target's own
// hidden states and need no model of their own to read the context: IBM's
// MLPSpeculator ([OpenMLPSpeculator]), Medusa heads ([OpenMedusa]) and EAGLE layers
// ([NewEAGLE] on a layer that llama.OpenEAGLE loads), from checkpoints laid out as vLLM
// loads them. [Open] opens any of them from its directory, and [Detect] tells what a
// drafter's path holds — a head of one of these kinds, or a model — for programs
// given a path as their drafter.
//
// The MLPSpeculator's and Medusa's products run on a [Pool] of threads, which an
// engine shares among all its heads.
package heads

import (
	"errors"
	"fmt"
	"io"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/backend/cpu"
	"github.com/specula/specula/draft"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/model"
	"github.com/specula/specula/model/llama"
)

// Options tune an opened head.
type Options struct {
	// Pool is the threads the products of an MLPSpeculator or Medusa heads run on:
	// an engine gives all its heads one. Nil: a pool of Threads threads of the
	// head's own, which its Close stops.
	Pool *Pool
	// Threads is how many threads a head without a Pool starts (and an EAGLE
	// layer's, unless Layer sets them); 0 means GOMAXPROCS.
	Threads int
	// Tree, for Medusa and EAGLE, makes the head draft trees of this shape; zero
	// drafts chains (MLPSpeculator always does).
	Tree draft.TreeShape
	// Requantize, when set (Q8_0), converts the head's float matrices to that type
	// at load (an EAGLE layer's too): half the bytes to read per drafted token.
	Requantize dtype.DType
	// Backend makes the backend of an EAGLE layer's model; nil: the CPU's on Threads
	// threads.
	Backend backend.Factory
	// Layer are the options of an EAGLE layer's model (its budget); its context length
	// is the target's unless set.
	Layer llama.Options
}

// Open opens the head in dir, whatever its kind ([Detect]), for the target described
// by target, loaded from targetPath (an EAGLE layer shares the target's embeddings).
// The returned closer releases the head's memory (and threads of its own), after its
// sessions are closed.
func Open(dir, targetPath string, target model.Info, opts Options) (draft.Drafter, io.Closer, error) {
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
	return openEAGLE(dir, targetPath, target, opts)
}

// openEAGLE loads the EAGLE layer in dir, with the target's context length, the
// head's requantization and a CPU backend on the head's threads unless opts.Layer
// sets its own, and drafts with it.
func openEAGLE(dir, targetPath string, target model.Info, opts Options) (draft.Drafter, io.Closer, error) {
	if opts.Requantize != 0 {
		opts.Layer.Requantize = opts.Requantize
	}
	if opts.Backend == nil {
		opts.Backend = cpu.Factory(opts.Threads)
	}
	if opts.Layer.ContextLength == 0 {
		opts.Layer.ContextLength = target.ContextLength
	}
	layer, err := llama.OpenEAGLE(dir, targetPath, opts.Backend, opts.Layer)
	if err != nil {
		return nil, nil, err
	}
	e, err := NewEAGLE(layer, target, opts.Tree)
	if err != nil {
		_ = layer.Close()
		return nil, nil, err
	}
	return e, layer, nil
}
