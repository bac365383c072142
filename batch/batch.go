// Package batch is the vocabulary of rows that a model, its backends and the sampler
// share: the tokens of one forward call ([Batch]) and the shape they take ([Tree]), a
// chain or a tree of drafted tokens. It is a leaf: it imports nothing of specula's, so
// that every layer can speak it without importing the layers above or below.
//
// A batch's shape is a [Tree], a parent list checked once: token i of a [Batch] hangs
// below token Parent(i) of the same batch, or below the last token already in the
// sequence when that is -1. A token at depth d of the tree takes position Len()+d, and
// attends to everything already in the sequence plus its own ancestors in the batch and
// itself. A chain is the tree in which every token's parent is the token before it; the
// zero Tree means exactly that.
package batch

// Batch is the input of one forward call.
type Batch struct {
	// Tokens are the new tokens, appended to the sequence in this order.
	Tokens []int32
	// Tree is the batch's shape: token i hangs below token Tree.Parent(i) of the
	// batch, or continues the tokens already in the sequence when that is -1. The
	// zero Tree is a chain; any other must have one node per token.
	Tree Tree
	// Outputs lists the indices in Tokens whose next-token logits are wanted. Row r of
	// the logits written by Forward belongs to Tokens[Outputs[r]]. Empty means none,
	// as in a prefill whose last token is forwarded later.
	Outputs []int32
	// States lists the indices in Tokens whose hidden states are wanted: the final
	// normed hidden state — the input of the output layer, what draft heads read —
	// from the same pass, at no extra cost. Row r of Hidden belongs to
	// Tokens[States[r]]. A model whose model.Info.HiddenSize is 0 refuses a batch that asks.
	States []int32
	// StateLayers, when set, adds to each state row the residual stream after each of
	// these layers (0-based, ascending), in front of the final state: a row then holds
	// (len(StateLayers)+1)·HiddenSize values. (EAGLE-3 heads read three layers.)
	StateLayers []int32
	// Hidden receives the state rows.
	Hidden []float32
	// Inputs holds, for a model whose model.Info.InputSize is not 0, the vector it takes
	// beside each token: len(Tokens)·InputSize values, token after token. Other
	// models take none.
	Inputs []float32
}

// StateWidth is the number of values of one row of Hidden for a batch of a model
// with the given hidden size.
func (b *Batch) StateWidth(hiddenSize int) int { return (len(b.StateLayers) + 1) * hiddenSize }
