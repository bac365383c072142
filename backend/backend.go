// Package backend is the contract between the Llama-family forward pass (package
// model/llama, written once) and what runs it: the handful of operations a
// transformer layer needs, on weights and key/value memory that the backend keeps in
// its own form. The CPU backend (backend/cpu) runs them with the SIMD kernels on host
// memory; the CUDA backend (package gpu) on a GPU. A new weight type, architecture or
// output is written once in model/llama against these operations, and each backend
// only learns the operations it lacks.
//
// A model does not choose its backend: it is given a [Factory] (cpu.Factory,
// gpu.Factory), which it calls with its shape once it has read that from its file.
// So model/llama imports neither backend, and a program that never asks for a GPU
// carries no CUDA loader.
//
// One forward call becomes one or more passes. The caller describes a pass in a [Plan]
// — the rows (tokens) of every sequence in it, their positions and rotary angles,
// where their keys and values go, what each row attends to, which rows give logits —
// and runs the layers through the [Pass] the backend hands it. Activations live in the
// backend, named by [Act]. Outside any pass, [Backend]'s MulRows and EmbedRow compute
// for the drafters that run beside a model on its backend (a trained head): products
// of a few host rows with matrices taken in, and rows of a table.
package backend

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/kvcache"
)

// RopeStyle says which dimensions rotary embeddings rotate together.
type RopeStyle int

const (
	// RopeInterleaved rotates dimension pairs (2i, 2i+1): the layout llama.cpp's
	// converter gives `llama` GGUF files, whose Q and K rows it permutes.
	RopeInterleaved RopeStyle = iota
	// RopeHalf rotates pairs (i, i+d/2): Hugging Face's rotate-half layout, used by
	// safetensors checkpoints and by `qwen2` GGUF files.
	RopeHalf
)

// Shape is what the operations need to know of a model.
type Shape struct {
	Layers  int
	Dim     int // hidden size
	Heads   int // query heads
	KVHeads int
	HeadDim int
	FFN     int // intermediate size
	Vocab   int
	RopeDim int // dimensions rotated per head
	Style   RopeStyle
	NormEps float32
}

// QKVWidth is the width of a row of the fused Q, K, V projection.
func (s Shape) QKVWidth() int { return (s.Heads + 2*s.KVHeads) * s.HeadDim }

// KVFloats is the number of floats one position keeps: keys and values of every
// layer and key/value head.
func (s Shape) KVFloats() int { return s.Layers * 2 * s.KVHeads * s.HeadDim }

// Tensor is a weight matrix as a file holds it, for a backend to take in: Rows × Cols
// values of one type, row-major, in Data.
type Tensor struct {
	Name       string
	Type       dtype.DType
	Rows, Cols int
	Data       []byte
	// Perm is the input each column multiplies, for a matrix whose columns were put
	// in another order than its inputs' (an act-order GPTQ layer repacked with its
	// inputs sorted by group, so that every block of 32 has one scale): column j holds
	// the weights of input Perm[j], and the product is y = W·x' with x'[j] = x[Perm[j]].
	// A backend gathers each activation row into that order once per matrix, before
	// it quantizes the row for the integer kernels. nil is the identity. Parts of one
	// matrix may have different ones (each reads its own gathered input). An
	// embedding table or output matrix has none: backends refuse one there.
	Perm []int32
}

// CheckMulRows reports an error, as every backend's MulRows does, unless x and y hold
// the n rows of a product with a matrix of rows × cols: n·cols inputs, n·rows outputs.
func CheckMulRows(n, rows, cols int, x, y []float32) error {
	if n < 0 || len(x) != n*cols || len(y) != n*rows {
		return fmt.Errorf("a product of %d rows with a %d × %d matrix: %d inputs and %d outputs given, want %d and %d",
			n, rows, cols, len(x), len(y), n*cols, n*rows)
	}
	return nil
}

// TableRow finds, as every backend's EmbedRow does, the part of a table of rows rows,
// made of parts side by side whose first rows are offs, that holds row i, and i's
// row within it; an error when i is not a row of the table.
func TableRow(offs []int, rows, i int) (part, row int, err error) {
	if i < 0 || i >= rows {
		return 0, 0, fmt.Errorf("row %d of a table of %d rows", i, rows)
	}
	part = len(offs) - 1
	for offs[part] > i {
		part--
	}
	return part, i - offs[part], nil
}

// SamePerm reports whether two column orders (Tensor.Perm) are the same: parts of one
// matrix with the same order share one gathered input.
func SamePerm(a, b []int32) bool { return (a == nil) == (b == nil) && slices.Equal(a, b) }

// CheckPerm reports an error naming the tensor unless its Perm is nil or a
// permutation of 0 … Cols−1.
func (t Tensor) CheckPerm() error {
	if t.Perm == nil {
		return nil
	}
	if len(t.Perm) != t.Cols {
		return fmt.Errorf("tensor %q: a permutation of %d inputs for %d columns", t.Name, len(t.Perm), t.Cols)
	}
	seen := make([]bool, t.Cols)
	for j, i := range t.Perm {
		if i < 0 || int(i) >= t.Cols || seen[i] {
			return fmt.Errorf("tensor %q: column %d reads input %d: not a permutation of [0, %d)", t.Name, j, i, t.Cols)
		}
		seen[i] = true
	}
	return nil
}

// Matrix is a weight matrix a backend has taken in, in its own form.
type Matrix interface {
	// Rows is the number of output columns a product with the matrix gives.
	Rows() int
	// Bytes is the memory the matrix takes in the backend.
	Bytes() int64
}

// Footprint is where memory a backend holds lies, in bytes: on the Go heap (which
// the garbage collector lets grow by GOGC % between collections), in anonymous
// mappings outside it, in mappings of a model's file (shared with the page cache,
// not copied), or on a device. A memory plan adds them up.
type Footprint struct {
	Heap, Anon, File, Device int64
}

// Bytes is the footprint's whole size.
func (f Footprint) Bytes() int64 { return f.Heap + f.Anon + f.File + f.Device }

// Add returns the sum of two footprints.
func (f Footprint) Add(g Footprint) Footprint {
	return Footprint{Heap: f.Heap + g.Heap, Anon: f.Anon + g.Anon, File: f.File + g.File, Device: f.Device + g.Device}
}

// Footprinter is a [Matrix] that says where its memory lies. A matrix that does not
// is counted as Bytes on the Go heap.
type Footprinter interface {
	Footprint() Footprint
}

// FootprintOf is where a matrix's memory lies: its Footprint, else its Bytes on the
// Go heap.
func FootprintOf(m Matrix) Footprint {
	if f, ok := m.(Footprinter); ok {
		return f.Footprint()
	}
	return Footprint{Heap: m.Bytes()}
}

// Vector is a float32 vector a backend has taken in (a norm's weights, a bias).
type Vector interface {
	Len() int
}

// Factory makes the backend of a model of the given shape. The model calls it once,
// at load, and owns what it returns: the model's Close closes it.
type Factory func(Shape) (Backend, error)

// Backend runs forward passes of one model shape.
type Backend interface {
	// Name says what runs the operations, for logs and benchmark tables.
	Name() string
	// Matrix takes in one weight matrix, or several side by side: the product with
	// them is one product whose output row holds each part's outputs in order (Q, K
	// and V as one projection). The parts share Cols. The tensors' bytes are not
	// kept: the caller may release them after. The matrix lives until the backend
	// is closed.
	Matrix(parts ...Tensor) (Matrix, error)
	// Vector takes in a vector.
	Vector(v []float32) (Vector, error)
	// MulRows writes y = x · mᵀ for the n rows of x, each of m's columns, to the n
	// rows of y, each of m.Rows() values: the product a pass's Mul computes, of rows
	// in host memory, outside any pass. It is the arithmetic of a drafter that runs
	// beside the model on the model's backend — a trained head's few rows a step,
	// with matrices it gave the backend — so that the head computes where the model
	// does. Safe for concurrent use, with passes too.
	MulRows(m Matrix, x []float32, n int, y []float32) error
	// EmbedRow writes row i of m (an embedding table) to dst as float32 values, as a
	// pass's Embed reads it, outside any pass. Safe for concurrent use.
	EmbedRow(m Matrix, i int, dst []float32) error
	// KV makes the key/value books and storage of a pool as s says: the layers it
	// stores, in blocks of s.BlockSize positions, within s.Budget bytes. A model
	// makes one pool, or a second for its sliding-window layers (see [KVSpec]).
	KV(s KVSpec) (*kvcache.Pool, error)
	// MaxRows is the most rows one pass may take (0: no limit); the caller cuts
	// longer forwards into passes.
	MaxRows() int
	// Run runs the layers over one pass of p. The backend may serialise passes (one
	// device, one stream); the CPU backend runs passes of different goroutines side by
	// side. The operations do not return errors: the first one fails the pass, the
	// rest do nothing, and Run returns that error (or the layers').
	Run(ctx context.Context, p *Plan, l Layers) error
	// Close releases the backend's memory. Its models must not be used after.
	Close() error
}

// KVSpec says what key/value pool a backend makes.
//
// A model makes one pool for every layer, or — when its sliding-window layers keep a
// shorter span of positions than its global ones (Gemma 3: five in six layers see
// the last 512 or 1024 positions) — two: the global layers' and the sliding ones'
// (Sliding), so that the sliding layers' blocks behind the window can be given back
// while the global layers keep theirs. The plan addresses the first pool by Slots and
// Span.Table, the sliding one by SlidingSlots and Span.SlidingTable; Attention of a
// layer uses the pool that stores it.
type KVSpec struct {
	// BlockSize is the number of positions per block (0: kvcache.DefaultBlockSize).
	BlockSize int
	// Budget is the most memory, in bytes, the pool's blocks may take.
	Budget int64
	// Layers lists the layers the pool stores, ascending; nil: every layer (then it
	// is the only pool).
	Layers []int
	// Sliding marks the sliding layers' pool.
	Sliding bool
}

// KVMap is where each layer's keys and values live, as a backend's KV calls set it:
// Pool[l] is 0 for the first pool and 1 for the sliding one (−1: none yet), Index[l]
// the layer's place among its pool's layers.
type KVMap struct {
	Pool, Index []int
	made        [2]bool
}

// Add makes the pool that s asks for on a model of layers layers, by calling build
// with its number (0 for the first pool, 1 for the sliding one) and number of layers,
// and records it when build succeeds: an error when the pool exists already, or its
// layers are not the model's, not ascending, or another pool's.
func (m *KVMap) Add(layers int, s KVSpec, build func(pool, count int) error) error {
	pool := 0
	if s.Sliding {
		pool = 1
	}
	if m.made[pool] {
		return fmt.Errorf("backend: the key/value pool (sliding %v) exists already", s.Sliding)
	}
	list := s.Layers
	if list == nil {
		list = upTo(layers)
	}
	for i, l := range list {
		switch {
		case l < 0 || l >= layers || i > 0 && l <= list[i-1]:
			return fmt.Errorf("backend: key/value pool layers %v: not ascending layers of %d", s.Layers, layers)
		case m.Pool != nil && m.Pool[l] >= 0:
			return fmt.Errorf("backend: layer %d is in two key/value pools", l)
		}
	}
	if err := build(pool, len(list)); err != nil {
		return err
	}
	if m.Pool == nil {
		m.Pool, m.Index = upTo(layers), upTo(layers)
		for l := range m.Pool {
			m.Pool[l] = -1
		}
	}
	for i, l := range list {
		m.Pool[l], m.Index[l] = pool, i
	}
	m.made[pool] = true
	return nil
}

// upTo returns 0, 1, …, n−1.
func upTo(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// Layers is what a pass runs over its rows: a model's architecture, as one call per
// pass (an interface rather than a func, so that a pass allocates no closure).
type Layers interface {
	Layers(ctx context.Context, ps Pass) error
}

// LayersFunc is a function as [Layers].
type LayersFunc func(ctx context.Context, ps Pass) error

// Layers implements [Layers].
func (f LayersFunc) Layers(ctx context.Context, ps Pass) error { return f(ctx, ps) }

// Act names an activation buffer of a pass: rows × the width given.
type Act int

const (
	X      Act = iota // the residual stream, Dim
	XN                // its normalised copy, Dim
	QKV               // the fused Q, K, V projection, Shape.QKVWidth
	Att               // the attention output, Heads·HeadDim
	GateUp            // gate and up side by side, 2·FFN
	Hidden            // silu(gate)·up, FFN
)

// Width is the number of values per row of an activation buffer.
func (s Shape) Width(a Act) int {
	switch a {
	case X, XN:
		return s.Dim
	case QKV:
		return s.QKVWidth()
	case Att:
		return s.Heads * s.HeadDim
	case GateUp:
		return 2 * s.FFN
	default:
		return s.FFN
	}
}

// Pass is the operations of one pass, over the rows of its plan.
type Pass interface {
	// Embed writes row r of dst as row Plan.Tokens[r] of table.
	Embed(dst Act, table Matrix)
	// Load writes the plan's input vectors (Plan.Inputs) to dst, row by row.
	Load(dst Act)
	// Norm writes dst = src / √(mean(src²) + eps) · w, row by row.
	Norm(dst, src Act, w Vector)
	// Mul writes dst = src · wᵀ, row by row.
	Mul(dst, src Act, w Matrix)
	// MulAdd adds src · wᵀ to dst.
	MulAdd(dst, src Act, w Matrix)
	// HeadNorm normalises, in every row of a, the heads head0 … head0+heads−1 (each
	// Shape.HeadDim values) on their own: x / √(mean(x²) + eps) · w, w of HeadDim
	// values — Qwen3's and Gemma 3's RMSNorm of each query and key head before the
	// rotation (the query heads of QKV are 0 … Heads−1, the key heads the next KVHeads).
	HeadNorm(a Act, head0, heads int, w Vector)
	// Attention is one layer's attention, as a says: it adds a.Bias (nil: none) to
	// the rows of QKV, rotates Q and K by the plan's angles (the local ones for
	// a.Local), stores K and V at the rows' slots of layer's cache, and writes to Att
	// each row's attention over what the plan says it sees — the last a.Window
	// positions of it when a.Window is positive — with scores scaled by a.Scale. It
	// never reads a position before a row's window: a model whose every layer slides
	// gives those blocks back to the pool ([kvcache.Hole] in its tables).
	Attention(layer int, a Attn)
	// GLU writes Hidden = act(gate)·up from GateUp: the gated feed-forward unit.
	GLU(act Activation)
	// Scale multiplies every row of a by s (Gemma's √Dim on its embeddings).
	Scale(a Act, s float32)
	// Add adds src to dst, row by row (a residual after a post-norm).
	Add(dst, src Act)
	// Save copies the rows of X that the plan's states ask for after layer (see
	// [State]) to their buffers. It is called after every layer.
	Save(layer int)
	// Final ends the pass: it normalises the plan's output rows and final-state rows
	// of X with w (nil: no norm), writes the final states to their buffers, and the
	// output rows' products with out to the outputs' buffers.
	Final(w Vector, out Matrix)
}

// FinalLayer is the Layer of a [State] that asks for the final normed hidden state.
const FinalLayer = -1

// Attn is what one layer's attention needs besides its weights and the plan.
type Attn struct {
	// Bias is added to the rows of QKV before the rotation; nil: none (Qwen2 has one).
	Bias Vector
	// Window, when positive, makes the layer a sliding-window one: a row at position
	// p sees only the positions p−Window+1 … p of what the plan lets it see (a key at
	// p0 is masked when p − p0 >= Window, as llama.cpp's standard sliding window).
	Window int
	// Local rotates by the plan's local angles (Plan.LocalRope) instead of Plan.Rope:
	// Gemma 3's sliding layers have a rotary base of their own.
	Local bool
	// Scale multiplies the scores q·k; 0 means 1/√HeadDim.
	Scale float32
}

// ScoreScale is the factor a.Scale asks for on a model of head dimension hd.
func (a Attn) ScoreScale(hd int) float32 {
	if a.Scale != 0 {
		return a.Scale
	}
	return float32(1 / math.Sqrt(float64(hd)))
}

// WindowStart is the first position a row of the plan sees in a layer of window w
// (0 for a layer without one): the row's own position is Prefix + its extras − 1,
// chain or tree, and the positions a row sees in order are 0 … that position.
func (p *Plan) WindowStart(r, w int) int {
	if w <= 0 {
		return 0
	}
	pos := int(p.Prefix[r]+p.ExtraOff[r+1]-p.ExtraOff[r]) - 1
	return max(0, pos-w+1)
}

// Activation is the function a gated feed-forward unit applies to its gate.
type Activation int

const (
	// SiLU is x·sigmoid(x) (Llama, Qwen, Phi, Mistral).
	SiLU Activation = iota
	// GELUTanh is GELU in its tanh form, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
	// (Gemma's GeGLU).
	GELUTanh
)

// String names the activation as Hugging Face's hidden_activation does.
func (a Activation) String() string {
	switch a {
	case SiLU:
		return "silu"
	case GELUTanh:
		return "gelu_pytorch_tanh"
	}
	return fmt.Sprintf("Activation(%d)", int(a))
}
