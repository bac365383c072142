// Package model defines the contract between specula and a language model.
//
// A [Model] is loaded once and shared, read-only, by every request. A request owns a
// [Sequence]: its own key/value state and length. A sequence forwards many new tokens in
// one call — a prompt, or a draft to verify — and writes logits only for the positions
// the caller asks for; [Model.Forward] does the same for several sequences in one pass.
// A sequence can be truncated back to any earlier length (the rollback of a rejected
// draft), and after a tree-shaped forward it can keep just one root-to-leaf path.
//
// The rows of a forward call and their shape — a chain, or a tree of drafted tokens —
// are package batch's vocabulary ([batch.Batch], [batch.Tree]), which the backends and
// the sampler share.
package model

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/kvcache"
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
	// HiddenSize is the width of the hidden states the model gives ([batch.Batch.States]);
	// 0 means it gives none.
	HiddenSize int
	// Layers is the number of layers whose residual streams a batch may ask for
	// ([batch.Batch.StateLayers]).
	Layers int
	// InputSize is the width of the vector the model takes beside each token
	// ([batch.Batch.Inputs]), as a draft layer takes the target's hidden state; 0 for a
	// model of tokens alone.
	InputSize int
	// TokenVocab, when not 0, is the number of token ids the model reads, where it
	// differs from VocabSize: an EAGLE-3 head reads the target's tokens and gives
	// logits over its smaller draft vocabulary. 0 means VocabSize.
	TokenVocab int
}

// Model is a loaded model. It is read-only after loading and safe for concurrent use;
// all per-request state lives in the sequences it creates.
type Model interface {
	// Info describes the model.
	Info() Info
	// NewSequence starts an empty sequence. It fails when the model cannot hold
	// another one (for instance when its key/value memory budget is spent).
	NewSequence(ctx context.Context) (Sequence, error)
	// Forward forwards the batches of several of the model's sequences in one pass,
	// reading every weight once for all of them: the step of a server that decodes
	// many requests at once. Each item does what its sequence's Forward would, and its
	// logits are bit for bit the same (batch invariance); a sequence appears at most
	// once. On error every sequence is left as it was.
	Forward(ctx context.Context, work []Work) error
}

// Work is one sequence's part of a [Model.Forward] call: the batch to append and the
// buffer its logits go to, as in [Sequence.Forward].
type Work struct {
	Seq    Sequence
	Batch  batch.Batch
	Logits []float32
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
	Forward(ctx context.Context, b batch.Batch, logits []float32) error
	// Truncate drops every token from position n on, so that Len() == n.
	Truncate(n int) error
	// Retain keeps, of the tokens from position from on, only those at the offsets
	// keep, in that order — position from+keep[i] moves to from+i — and drops the
	// others, so that Len() becomes from+len(keep). keep must be strictly ascending,
	// each offset below Len()-from. To keep one root-to-leaf path of a tree forwarded
	// at from, keep lists the path's batch indices (ascending, since a parent comes
	// before its children): the sequence is then exactly as if the path had been
	// forwarded as a chain. Retain needs no memory of the forward, so any caller that
	// knows the tree can call it at any time; whether keep is a path of that tree is
	// the caller's to know (see [batch.PathOf]). On error nothing is changed.
	Retain(from int, keep []int32) error
	// Close releases the sequence's memory. The sequence must not be used after.
	Close() error
}

// PrefixSequence is a [Sequence] whose model keeps a prefix cache: keys and values of
// prompts that sequences computed and published, found again by their tokens and
// shared, so that a request whose prompt begins like an earlier one's (a system
// prompt, a conversation so far, few-shot examples) forwards only the rest.
type PrefixSequence interface {
	Sequence
	// Reuse, on an empty sequence, takes in the longest prefix of tokens the cache
	// holds, in whole blocks, and returns its length: those positions are held and
	// need no forward.
	Reuse(tokens []int32) int
	// Publish offers the sequence's full blocks to the cache. Publish only tokens
	// that stay (a prompt, accepted output), not a draft under verification.
	Publish()
}

// SaltedSequence is a [PrefixSequence] whose prefix-cache keys take a salt beside the
// tokens: for a model whose keys and values depend on more than its tokens — an EAGLE
// layer's rows read the target's states, and those depend on the prompt's first token,
// which the layer is never fed. The salt goes in front of the first block's hash, so
// blocks published under one salt are found again only under the same salt.
type SaltedSequence interface {
	PrefixSequence
	// Salt, on an empty sequence, sets the salt of its later Reuse and Publish.
	Salt(salt uint64) error
}

// ForkSequence is a [Sequence] that forks: the new sequence holds the same tokens and
// shares their key/value memory copy-on-write, so that several continuations of one
// prompt (n samples, say) prefill it once.
type ForkSequence interface {
	Sequence
	// Fork returns the new sequence; it must be closed on its own.
	Fork() (Sequence, error)
}

// ErrContextFull is returned (wrapped) when a forward would take a sequence past the
// model's context length.
var ErrContextFull = errors.New("model: context length exceeded")

// ErrOutOfMemory is returned (wrapped) when a sequence cannot grow because the memory
// set aside for key/value state is spent. Memory comes back as other sequences shrink
// or close. It is the key/value cache's own error: one condition, one sentinel.
var ErrOutOfMemory = kvcache.ErrOutOfMemory

// ErrClosed is returned (wrapped) when a closed sequence is used.
var ErrClosed = errors.New("model: sequence is closed")

// CheckBatch validates b against a sequence that holds seqLen tokens of a model
// described by info, whose logits go to a buffer of logitsLen values. Implementations
// of [Sequence] call it first so that every runtime rejects the same inputs with the
// same errors.
func CheckBatch(b batch.Batch, seqLen int, info Info, logitsLen int) error {
	n, vocab := len(b.Tokens), info.VocabSize
	if info.ContextLength > 0 && seqLen+n > info.ContextLength {
		return fmt.Errorf("%w: %d tokens held + %d new > context length %d", ErrContextFull, seqLen, n, info.ContextLength)
	}
	tokens := vocab
	if info.TokenVocab > 0 {
		tokens = info.TokenVocab
	}
	for i, t := range b.Tokens {
		if t < 0 || int(t) >= tokens {
			return fmt.Errorf("model: token %d at batch index %d is outside the vocabulary [0, %d)", t, i, tokens)
		}
	}
	if !b.Tree.Chain() && b.Tree.Len() != n {
		return fmt.Errorf("model: batch has a tree of %d nodes for %d tokens", b.Tree.Len(), n)
	}
	if err := checkRows("output", b.Outputs, n); err != nil {
		return err
	}
	if need := len(b.Outputs) * vocab; logitsLen < need {
		return fmt.Errorf("model: logits buffer holds %d values, %d outputs need %d", logitsLen, len(b.Outputs), need)
	}
	if err := checkStates(b, info); err != nil {
		return err
	}
	if need := n * info.InputSize; len(b.Inputs) != need {
		return fmt.Errorf("model: batch has %d input values, %d tokens of a model taking %d each need %d", len(b.Inputs), n, info.InputSize, need)
	}
	return nil
}

// checkRows checks that every index of rows names a token of a batch of n.
func checkRows(what string, rows []int32, n int) error {
	for r, o := range rows {
		if o < 0 || int(o) >= n {
			return fmt.Errorf("model: %s %d names batch index %d, outside [0, %d)", what, r, o, n)
		}
	}
	return nil
}

// checkStates checks a batch's request for hidden states.
func checkStates(b batch.Batch, info Info) error {
	if len(b.States) == 0 {
		return nil
	}
	if info.HiddenSize == 0 {
		return fmt.Errorf("model: the batch asks for %d hidden states; model %q gives none", len(b.States), info.Name)
	}
	if err := checkRows("state", b.States, len(b.Tokens)); err != nil {
		return err
	}
	for i, l := range b.StateLayers {
		if l < 0 || int(l) >= info.Layers || (i > 0 && l <= b.StateLayers[i-1]) {
			return fmt.Errorf("model: state layers %v must ascend within [0, %d)", b.StateLayers, info.Layers)
		}
	}
	if need := len(b.States) * b.StateWidth(info.HiddenSize); len(b.Hidden) < need {
		return fmt.Errorf("model: hidden buffer holds %d values, %d states need %d", len(b.Hidden), len(b.States), need)
	}
	return nil
}

// CheckWork validates the shape of a [Model.Forward] call: every item names a
// sequence, none twice. Each batch is then checked by its sequence, with [CheckBatch].
func CheckWork(work []Work) error {
	for i, w := range work {
		if w.Seq == nil {
			return fmt.Errorf("model: work item %d has no sequence", i)
		}
		if !reflect.TypeOf(w.Seq).Comparable() {
			continue // a value no other item can be the same as
		}
		for j := range i {
			if reflect.TypeOf(work[j].Seq) == reflect.TypeOf(w.Seq) && work[j].Seq == w.Seq {
				return fmt.Errorf("model: work items %d and %d name the same sequence", j, i)
			}
		}
	}
	return nil
}

// CheckRetain validates a Retain(from, keep) call on a sequence of seqLen tokens.
func CheckRetain(from int, keep []int32, seqLen int) error {
	if from < 0 || from > seqLen {
		return fmt.Errorf("model: retain from position %d outside [0, %d]", from, seqLen)
	}
	for i, k := range keep {
		if k < 0 || int(k) >= seqLen-from {
			return fmt.Errorf("model: retain offset %d at index %d is outside the %d tokens after position %d", k, i, seqLen-from, from)
		}
		if i > 0 && k <= keep[i-1] {
			return fmt.Errorf("model: retain offset %d at index %d does not follow %d in ascending order", k, i, keep[i-1])
		}
	}
	return nil
}
