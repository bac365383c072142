// Package model defines the contract between specula and a language model, and
// (in later files and subpackages) the transformer runtime that fulfils it.
//
// A [Model] is loaded once and shared, read-only, by every request. A request owns a
// [Sequence]: its own key/value state and length. A sequence forwards many new tokens in
// one call — a prompt, or a draft to verify — and writes logits only for the positions
// the caller asks for. It can be truncated back to any earlier length (the rollback of a
// rejected draft), and after a tree-shaped forward it can keep just one root-to-leaf path.
//
// Trees are described by a parent list: token i of a [Batch] hangs below token
// Parents[i] of the same batch, or below the last token already in the sequence when
// Parents[i] is -1. A token at depth d of the tree takes position Len()+d, and attends to
// everything already in the sequence plus its own ancestors in the batch and itself. A
// chain is the tree in which every token's parent is the token before it; a nil parent
// list means exactly that.
package model

import (
	"context"
	"errors"
	"fmt"
)

// Info describes a loaded model.
type Info struct {
	// Name is a human-readable name, usually taken from the file.
	Name string
	// Arch names the architecture ("llama", "qwen2", "markov", …).
	Arch string
	// VocabSize is the number of logits the model produces per position.
	VocabSize int
	// ContextLength is the largest number of positions a sequence may hold; 0 means
	// the model sets no limit.
	ContextLength int
}

// Model is a loaded model. It is read-only after loading and safe for concurrent use;
// all per-request state lives in the sequences it creates.
type Model interface {
	// Info describes the model.
	Info() Info
	// NewSequence starts an empty sequence. It fails when the model cannot hold
	// another one (for instance when its key/value memory budget is spent).
	NewSequence(ctx context.Context) (Sequence, error)
}

// Batch is the input of one forward call.
type Batch struct {
	// Tokens are the new tokens, appended to the sequence in this order.
	Tokens []int32
	// Parents, when not nil, has one entry per token: the index in Tokens of the
	// token's parent (smaller than its own index), or -1 for a token that continues
	// the tokens already in the sequence. Nil means a chain.
	Parents []int32
	// Outputs lists the indices in Tokens whose next-token logits are wanted. Row r of
	// the logits written by Forward belongs to Tokens[Outputs[r]]. Empty means none,
	// as in a prefill whose last token is forwarded later.
	Outputs []int32
}

// Sequence is one request's state in a model: the tokens forwarded so far and whatever
// the model keeps for them. A sequence is not safe for concurrent use.
type Sequence interface {
	// Len is the number of tokens the sequence holds.
	Len() int
	// Forward appends b.Tokens and writes the logits of the tokens named by
	// b.Outputs to logits, one row of VocabSize values per output, in order. logits
	// must hold at least len(b.Outputs)*VocabSize values. On error the sequence is
	// left as it was before the call.
	Forward(ctx context.Context, b Batch, logits []float32) error
	// Truncate drops every token from position n on, so that Len() == n.
	Truncate(n int) error
	// Retain keeps, of the tokens the last Forward appended, only those at the batch
	// indices keep, in that order, and drops the others: Len() becomes the length
	// before that Forward plus len(keep). keep must be a path from a root of the
	// batch's tree (keep[0] has parent -1, each next index is a child of the one
	// before); for a chain that is a prefix 0, 1, …. The sequence is then exactly as
	// if the path had been forwarded as a chain. Retain is only valid directly after
	// a Forward.
	Retain(keep []int32) error
	// Close releases the sequence's memory. The sequence must not be used after.
	Close() error
}

// ErrContextFull is returned (wrapped) when a forward would take a sequence past the
// model's context length.
var ErrContextFull = errors.New("model: context length exceeded")

// ErrOutOfMemory is returned (wrapped) when a sequence cannot grow because the memory
// set aside for key/value state is spent. Memory comes back as other sequences shrink
// or close.
var ErrOutOfMemory = errors.New("model: key/value memory exhausted")

// ErrClosed is returned (wrapped) when a closed sequence is used.
var ErrClosed = errors.New("model: sequence is closed")

// CheckBatch validates b against a sequence that holds seqLen tokens, in a model with
// the given vocabulary size and context length (0 = unlimited), and whose logits go to
// a buffer of logitsLen values. Implementations of [Sequence] call it first so that
// every runtime rejects the same inputs with the same errors.
func CheckBatch(b Batch, seqLen, vocab, contextLen, logitsLen int) error {
	n := len(b.Tokens)
	if contextLen > 0 && seqLen+n > contextLen {
		return fmt.Errorf("%w: %d tokens held + %d new > context length %d", ErrContextFull, seqLen, n, contextLen)
	}
	for i, t := range b.Tokens {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("model: token %d at batch index %d is outside the vocabulary [0, %d)", t, i, vocab)
		}
	}
	if b.Parents != nil {
		if len(b.Parents) != n {
			return fmt.Errorf("model: batch has %d parents for %d tokens", len(b.Parents), n)
		}
		for i, p := range b.Parents {
			if p < -1 || int(p) >= i {
				return fmt.Errorf("model: parent %d of batch index %d must be -1 or an earlier index", p, i)
			}
		}
	}
	for r, o := range b.Outputs {
		if o < 0 || int(o) >= n {
			return fmt.Errorf("model: output %d names batch index %d, outside [0, %d)", r, o, n)
		}
	}
	if need := len(b.Outputs) * vocab; logitsLen < need {
		return fmt.Errorf("model: logits buffer holds %d values, %d outputs need %d", logitsLen, len(b.Outputs), need)
	}
	return nil
}

// CheckRetain validates a Retain(keep) call after a Forward of n tokens with the given
// parent list (nil for a chain).
func CheckRetain(keep, parents []int32, n int) error {
	if len(keep) > n {
		return fmt.Errorf("model: retain %d tokens of a batch of %d", len(keep), n)
	}
	prev := int32(-1)
	for i, k := range keep {
		if k < 0 || int(k) >= n {
			return fmt.Errorf("model: retain index %d at position %d is outside the batch of %d", k, i, n)
		}
		parent := k - 1
		if parents != nil {
			parent = parents[k]
		}
		if parent != prev {
			return fmt.Errorf("model: retain index %d at position %d is not a child of %d", k, i, prev)
		}
		prev = k
	}
	return nil
}

// Depths writes, for each token of a batch with the given parent list, its depth in the
// tree (0 for a token whose parent is -1) to dst, which must have len(parents) entries.
// A nil parent list is a chain: depths 0, 1, 2, …. The parent list must be valid (see
// CheckBatch); an entry that is not is read as -1.
func Depths(parents []int32, dst []int32) {
	for i := range dst {
		switch {
		case parents == nil:
			dst[i] = int32(i)
		case parents[i] < 0 || int(parents[i]) >= i:
			dst[i] = 0
		default:
			dst[i] = dst[parents[i]] + 1
		}
	}
}
