package gpu

import (
	"github.com/specula/specula/backend"
	"github.com/specula/specula/format/dtype"
)

// devptr is an address in a backend's memory: a CUDA device pointer, or for the host
// backend an allocation number and offset. Adding a byte offset to a devptr addresses
// further into the same allocation.
type devptr uint64

// wtensor is a weight matrix in a backend's memory: rows × cols values of one type,
// row-major.
type wtensor struct {
	typ        dtype.DType
	rows, cols int
	p          devptr
}

// rowBytes is the size of one row.
func (w wtensor) rowBytes() int64 {
	b, _ := w.typ.Bytes(int64(w.cols))
	return b
}

// kvGeom is the shape of a key/value block pool: block b holds, for every layer l,
// kind k (0 keys, 1 values) and kv head h, blockSize × headDim floats at
// ((((b·layers + l)·2 + k)·kvHeads + h)·blockSize + slot)·headDim.
type kvGeom struct {
	base                                devptr
	layers, kvHeads, headDim, blockSize int
}

// blockFloats is the number of floats of one block.
func (g kvGeom) blockFloats() int64 {
	return int64(g.layers) * 2 * int64(g.kvHeads) * int64(g.blockSize) * int64(g.headDim)
}

// runs is the number of (layer, kind, head) runs of a block.
func (g kvGeom) runs() int { return g.layers * 2 * g.kvHeads }

// qkvArgs are the inputs of the step after the Q, K, V projection: add the biases,
// rotate Q and K, store K and V in the cache, write Q out.
type qkvArgs struct {
	qkv   devptr // n × (heads+2·kvHeads)·headDim
	bias  devptr // (heads+2·kvHeads)·headDim, or 0
	rope  devptr // n × ropeDim: per token ropeDim/2 cosines, then ropeDim/2 sines
	slots devptr // n int32: physical slot (block·blockSize + slot) of each token
	q     devptr // out: n × heads·headDim
	n     int
	heads int
	// ropeDim is the number of rotated dimensions per head; style 0 interleaved
	// pairs, 1 rotate-half.
	ropeDim, style int
	layer          int
	kv             kvGeom
}

// attnArgs are the inputs of attention for n tokens. Token i sees the positions
// 0 … prefix[i]−1, then base+extras[extraOff[i]+k] for k < extraCnt[i], in that order;
// in a sliding-window layer (window > 0) only the last window of them.
// The device backend passes absolute positions as extras (a plan's), so base is 0.
type attnArgs struct {
	q, out                             devptr // n × heads·headDim
	table                              devptr // int32 block ids of the sequence
	prefix, extraOff, extraCnt, extras devptr // int32
	n, heads, base, layer              int
	maxVisible                         int // the largest visible count of the n tokens
	scale                              float32
	window                             int
	kv                                 kvGeom
}

// deviceOps are the primitive operations of a device — memory, copies and kernels —
// that [Backend] builds the operations of package backend from. cudaOps runs them on
// a GPU; hostOps is their plain-Go definition, slow and simple, against which the
// tests check the Backend and the CUDA kernels. Calls are not safe for concurrent use:
// the [Device] serialises them.
type deviceOps interface {
	kind() string
	alloc(bytes int64) (devptr, error)
	free(p devptr) error
	upload(dst devptr, src []byte) error
	download(dst []byte, src devptr) error
	// fill writes n pseudo-random values offset + scale·u, u uniform in [−1, 1), of
	// type typ (F32, F16, BF16 or Q8_0) from seed.
	fill(p devptr, typ dtype.DType, n int64, seed uint64, scale, offset float32) error
	// embed writes out[i] = W[tokens[i]] as float32 rows of w.cols values.
	embed(out devptr, w wtensor, tokens devptr, n int) error
	// rmsNorm writes out[i] = x[r] / √(mean(x[r]²) + eps) · w for r = rows[i] (rows
	// int32), or r = i when rows is 0.
	rmsNorm(out, x, w, rows devptr, n, dim int, eps float32) error
	// headNorm normalises in place, in each of the n rows of x (width values
	// apart), the heads head0 … head0+heads−1 of hd values each, as rmsNorm with
	// weights w of hd values.
	headNorm(x, w devptr, n, width, head0, heads, hd int, eps float32) error
	// matmul computes out[t·ldo + r] = Σ_c W[r, c]·x[t·cols + c] for t < n, or adds
	// it to out when accumulate is set.
	matmul(out devptr, ldo int, x devptr, n int, w wtensor, accumulate bool) error
	// gather writes out[t·cols + j] = x[t·cols + perm[j]] for t < n (perm: cols
	// int32, a permutation): a product's input in the column order of a weight
	// whose columns were permuted.
	gather(out, x, perm devptr, n, cols int) error
	qkv(a qkvArgs) error
	attention(a attnArgs) error
	// glu writes out[t·ffn + c] = act(gu[t·2ffn + c])·gu[t·2ffn + ffn + c].
	glu(out, gu devptr, n, ffn int, act backend.Activation) error
	// scale multiplies the total floats at x by s.
	scale(x devptr, total int64, s float32) error
	// add adds the total floats at x to those at y.
	add(y, x devptr, total int64) error
	// kvCopy copies, pair after pair, the slot pairs[2p+1] to the slot pairs[2p]
	// (physical slot indices, int32) in every layer, kind and head.
	kvCopy(kv kvGeom, pairs devptr, m int) error
	sync() error
	close() error
}
