package gpu

import (
	"errors"
	"fmt"
	"slices"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/kvcache"
)

// BackendOptions tune a device backend.
type BackendOptions struct {
	// MaxBatch is the most rows one pass takes; the caller cuts longer forwards into
	// passes of this many, which bounds the scratch memory. 0 means 256.
	MaxBatch int
}

// Backend runs the operations of package backend on a device: weights, activations
// and the key/value blocks live in device memory, and every operation is one or a few
// kernel launches. It implements [backend.Backend]; passes on one device run one at a
// time.
type Backend struct {
	dev    *Device
	shape  backend.Shape
	opts   BackendOptions
	allocs []devptr     // weights, freed by Close
	kv     [2]*deviceKV // the first pool and the sliding layers' (backend.KVSpec)
	kvmap  backend.KVMap
	s      scratch
	rows   hostRows   // the device memory of MulRows and EmbedRow
	pass   devicePass // the pass in progress, reused
	// permuted: a matrix with permuted columns was taken in, so passes need the
	// gathered-input buffer (scratch.gathered).
	permuted bool
	closed   bool
}

// scratch holds the activation buffers of one pass, grown as larger passes come, and
// the plan's copy in device memory.
type scratch struct {
	rows       int // capacity in rows
	acts       [6]devptr
	q          devptr // the rotated queries, rows × Heads·HeadDim
	outs       int    // capacity in output rows
	rows1      devptr // normalised output rows
	logits     devptr
	metaBytes  int64
	meta       devptr
	stage      []byte
	ints       []int32
	logitStage []float32
	hostX      []float32 // X copied back, for states and rows without a norm
	gathered   []float32
	stateRows  []int
	// perm holds a product's input rows in the column order of a part
	// (dmatrix.inputs), rows × the widest activation; allocated once a permuted
	// matrix is taken in.
	perm     devptr
	permRows int
}

// NewBackend makes a backend for models of the given shape on dev.
func NewBackend(dev *Device, shape backend.Shape, opts BackendOptions) (*Backend, error) {
	if dev == nil {
		return nil, errors.New("cuda: nil device")
	}
	if err := checkShape(shape); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 256
	}
	return &Backend{dev: dev, shape: shape, opts: opts}, nil
}

// Factory makes backends on dev, one for each model it is given to:
// llama.Open(path, gpu.Factory(dev, gpu.BackendOptions{}), llama.Options{}). The
// device must outlive the models.
func Factory(dev *Device, opts BackendOptions) backend.Factory {
	return func(shape backend.Shape) (backend.Backend, error) {
		b, err := NewBackend(dev, shape, opts)
		if err != nil {
			return nil, err // not a nil *Backend in a non-nil interface
		}
		return b, nil
	}
}

// checkShape validates a shape for the device kernels.
func checkShape(s backend.Shape) error {
	switch {
	case s.HeadDim <= 0 || s.HeadDim%2 != 0 || s.HeadDim > maxHeadDim:
		return fmt.Errorf("head dimension %d must be even and in (0, %d]", s.HeadDim, maxHeadDim)
	case s.Style != backend.RopeInterleaved && s.Style != backend.RopeHalf:
		return fmt.Errorf("rope style %d", s.Style)
	}
	return nil
}

// Name implements [backend.Backend].
func (g *Backend) Name() string {
	if g.dev.cuda == nil {
		return "host reference device"
	}
	return "cuda " + g.dev.info.Name
}

// MaxRows implements [backend.Backend].
func (g *Backend) MaxRows() int { return g.opts.MaxBatch }

// Device returns the device the backend runs on.
func (g *Backend) Device() *Device { return g.dev }

// do runs f on the device, unless the backend is closed.
func (g *Backend) do(f func(b deviceOps) error) error {
	return g.dev.do(func(b deviceOps) error {
		if g.closed {
			return errors.New("cuda: the backend is closed")
		}
		return f(b)
	})
}

// dmatrix is one or more weight tensors in device memory whose outputs sit side by
// side: consecutive parts of one type and one column order are stacked into one, so
// that the product is one launch.
type dmatrix struct {
	parts []wtensor
	offs  []int
	// inputs are the column orders of the parts, each once, as device int32 arrays
	// (0: the inputs' own order); part i reads the input gathered by
	// inputs[input[i]].
	inputs []devptr
	input  []int
	rows   int
	bytes  int64
}

// permuted reports whether a part's columns are not in the inputs' order.
func (m *dmatrix) permuted() bool {
	return slices.ContainsFunc(m.inputs, func(p devptr) bool { return p != 0 })
}

func (m *dmatrix) Rows() int    { return m.rows }
func (m *dmatrix) Bytes() int64 { return m.bytes }

// Footprint implements [backend.Footprinter]: the weights lie in device memory.
func (m *dmatrix) Footprint() backend.Footprint { return backend.Footprint{Device: m.bytes} }

// dvector is a float32 vector in device memory.
type dvector struct {
	p devptr
	n int
}

func (v dvector) Len() int { return v.n }

// supportedWeight reports whether the device multiplies by weights of type t.
func supportedWeight(t dtype.DType) bool {
	return t == dtype.F32 || t == dtype.F16 || t == dtype.BF16 || t == dtype.Q8_0
}

// Matrix implements [backend.Backend]. A part's column order (Tensor.Perm) is
// uploaded once for all the parts that share it. Q4_Z and Q4_Z128 parts (specula's
// exact repacking of AWQ and asymmetric GPTQ layers) are converted to Q8_0 on the way
// in, value for value (dtype.ZToQ8_0): the device has no 4-bit kernel, and Q8_0 holds
// every Q4_Z value exactly; F8_E4M3_B128 parts to their F32 values (deviceTypes).
func (g *Backend) Matrix(parts ...backend.Tensor) (backend.Matrix, error) {
	if len(parts) == 0 {
		return nil, errors.New("cuda: a matrix of no parts")
	}
	parts, err := deviceTypes(parts)
	if err != nil {
		return nil, err
	}
	for _, t := range parts {
		if err := checkTensor(t, parts[0].Cols); err != nil {
			return nil, err
		}
	}
	m := &dmatrix{}
	var perms [][]int32 // m.inputs on the host
	err = g.do(func(b deviceOps) error {
		for lo := 0; lo < len(parts); {
			hi := lo + 1
			for hi < len(parts) && parts[hi].Type == parts[lo].Type && backend.SamePerm(parts[hi].Perm, parts[lo].Perm) {
				hi++
			}
			w, err := g.upload(b, parts[lo:hi])
			if err != nil {
				return err
			}
			perm := parts[lo].Perm
			in := slices.IndexFunc(perms, func(p []int32) bool { return backend.SamePerm(p, perm) })
			if in < 0 {
				var p devptr
				if perm != nil {
					if p, err = g.alloc(b, int64(4*len(perm))); err != nil {
						return fmt.Errorf("cuda: tensor %q: its permutation: %w", parts[lo].Name, err)
					}
					if err := b.upload(p, bytesOf(perm)); err != nil {
						return fmt.Errorf("cuda: uploading the permutation of %q: %w", parts[lo].Name, err)
					}
					g.permuted = true
				}
				in, perms, m.inputs = len(perms), append(perms, perm), append(m.inputs, p)
			}
			m.parts, m.offs, m.input = append(m.parts, w), append(m.offs, m.rows), append(m.input, in)
			m.rows += w.rows
			m.bytes += w.rowBytes() * int64(w.rows)
			lo = hi
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// deviceTypes returns parts with each tensor of a type the device has no kernel for
// replaced by an exact copy in one it has (the caller's slice is left as it is): Q4_Z
// and Q4_Z128 by their Q8_0 copy (dtype.ZToQ8_0: same scale, codes q − z), F8_E4M3_B128
// (block-wise FP8) by its F32 values (dtype.Dequantize's, each E4M3(code) · scale
// rounded once: exactly the values the CPU's F8 kernels compute with, at 4 bytes a
// weight instead of about 1).
func deviceTypes(parts []backend.Tensor) ([]backend.Tensor, error) {
	var out []backend.Tensor
	for i, t := range parts {
		if t.Type != dtype.Q4_Z && t.Type != dtype.Q4_Z128 && t.Type != dtype.F8_E4M3_B128 {
			continue
		}
		if out == nil {
			out = slices.Clone(parts)
		}
		typ, data, err := deviceCopy(t)
		if err != nil {
			return nil, fmt.Errorf("cuda: tensor %q: %w", t.Name, err)
		}
		out[i].Type, out[i].Data = typ, data
	}
	if out == nil {
		return parts, nil
	}
	return out, nil
}

// deviceCopy is a Q4_Z, Q4_Z128 or F8_E4M3_B128 tensor's exact copy as Q8_0 or F32.
func deviceCopy(t backend.Tensor) (dtype.DType, []byte, error) {
	if t.Type == dtype.Q4_Z || t.Type == dtype.Q4_Z128 {
		data, err := dtype.ZToQ8_0(t.Type, t.Data)
		return dtype.Q8_0, data, err
	}
	if t.Rows <= 0 || t.Cols <= 0 {
		return 0, nil, fmt.Errorf("%d × %d %s", t.Rows, t.Cols, t.Type)
	}
	vals := make([]float32, t.Rows*t.Cols)
	if err := dtype.Dequantize(t.Type, t.Data, vals); err != nil {
		return 0, nil, err
	}
	data, err := dtype.Encode(dtype.F32, vals)
	return dtype.F32, data, err
}

// checkTensor validates a weight tensor for the device.
func checkTensor(t backend.Tensor, cols int) error {
	if !supportedWeight(t.Type) {
		return fmt.Errorf("cuda: tensor %q has type %s; the device supports F32, F16, BF16 and Q8_0 (and Q4_Z, Q4_Z128 as Q8_0, F8_E4M3_B128 as F32)", t.Name, t.Type)
	}
	if t.Cols != cols {
		return fmt.Errorf("cuda: tensor %q has %d columns, want %d", t.Name, t.Cols, cols)
	}
	rb, err := t.Type.Bytes(int64(t.Cols))
	if err != nil || t.Rows <= 0 || int64(len(t.Data)) != rb*int64(t.Rows) {
		return fmt.Errorf("cuda: tensor %q: %d bytes for %d × %d %s", t.Name, len(t.Data), t.Rows, t.Cols, t.Type)
	}
	if err := t.CheckPerm(); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	return nil
}

// upload copies tensors of one type, stacked, into one device allocation.
func (g *Backend) upload(b deviceOps, ts []backend.Tensor) (wtensor, error) {
	total, rows := int64(0), 0
	for _, t := range ts {
		total += int64(len(t.Data))
		rows += t.Rows
	}
	p, err := g.alloc(b, total)
	if err != nil {
		return wtensor{}, fmt.Errorf("cuda: tensor %q: %w", ts[0].Name, err)
	}
	off := devptr(0)
	for _, t := range ts {
		if err := b.upload(p+off, t.Data); err != nil {
			return wtensor{}, fmt.Errorf("cuda: uploading %q: %w", t.Name, err)
		}
		off += devptr(len(t.Data))
	}
	return wtensor{typ: ts[0].Type, rows: rows, cols: ts[0].Cols, p: p}, nil
}

// alloc allocates device memory that Close frees.
func (g *Backend) alloc(b deviceOps, bytes int64) (devptr, error) {
	p, err := b.alloc(bytes)
	if err != nil {
		return 0, err
	}
	g.allocs = append(g.allocs, p)
	return p, nil
}

// Vector implements [backend.Backend].
func (g *Backend) Vector(v []float32) (backend.Vector, error) {
	var out dvector
	err := g.do(func(b deviceOps) error {
		p, err := g.alloc(b, int64(4*max(len(v), 1)))
		if err != nil {
			return fmt.Errorf("cuda: vector of %d: %w", len(v), err)
		}
		out = dvector{p: p, n: len(v)}
		return b.upload(p, bytesOf(v))
	})
	return out, err
}

// Close implements [backend.Backend]: it frees the device memory of the weights, the
// key/value pool and the scratch buffers.
func (g *Backend) Close() error {
	return g.dev.do(func(b deviceOps) error {
		if g.closed {
			return nil
		}
		g.closed = true
		var errs []error
		for _, p := range g.allocs {
			errs = append(errs, b.free(p))
		}
		g.allocs = nil
		for _, p := range append(g.s.acts[:], g.s.q, g.s.rows1, g.s.logits, g.s.meta, g.s.perm) {
			if p != 0 {
				errs = append(errs, b.free(p))
			}
		}
		for _, kv := range g.kv {
			if kv != nil {
				errs = append(errs, kv.free(b))
			}
		}
		g.s = scratch{}
		errs = append(errs, g.rows.free(b))
		return errors.Join(errs...)
	})
}

// deviceKV is the key/value pool in device memory: the storage of the books, which
// copy through it.
type deviceKV struct {
	g     *Backend
	geom  kvGeom
	pairs devBuf // the slot pairs of a Copy, on their way to the kernel
}

// KV implements [backend.Backend]: the whole budget is allocated now.
func (g *Backend) KV(spec backend.KVSpec) (*kvcache.Pool, error) {
	blockSize := spec.BlockSize
	if blockSize <= 0 {
		blockSize = kvcache.DefaultBlockSize
	}
	var books *kvcache.Pool
	err := g.kvmap.Add(g.shape.Layers, spec, func(pool, layers int) error {
		kv, p, err := g.newKV(blockSize, spec.Budget, layers)
		books, g.kv[pool] = p, kv
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	return books, nil
}

// newKV allocates a pool of layers layers within budget bytes on the device, and its
// books.
func (g *Backend) newKV(blockSize int, budget int64, layers int) (*deviceKV, *kvcache.Pool, error) {
	s := &g.shape
	geom := kvGeom{layers: layers, kvHeads: s.KVHeads, headDim: s.HeadDim, blockSize: blockSize}
	cfg := kvcache.Config{BlockSize: blockSize, BlockBytes: 4 * geom.blockFloats(), Budget: budget}
	blocks, err := cfg.Blocks()
	if err != nil {
		return nil, nil, err
	}
	kv := &deviceKV{g: g, geom: geom}
	err = g.do(func(b deviceOps) error {
		p, err := b.alloc(int64(blocks) * cfg.BlockBytes)
		if err != nil {
			return fmt.Errorf("key/value pool of %d blocks (%d bytes): %w", blocks, int64(blocks)*cfg.BlockBytes, err)
		}
		kv.geom.base = p
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	books, err := kvcache.NewPool(cfg, kv)
	if err != nil {
		_ = g.do(kv.free)
		return nil, nil, err
	}
	return kv, books, nil
}

// checkKV checks that layer has a key/value pool and that the plan's rows hold, in
// it, what they see.
func (g *Backend) checkKV(p *backend.Plan, layer, window int) error {
	if layer < 0 || layer >= len(g.kvmap.Pool) || g.kvmap.Pool[layer] < 0 {
		return fmt.Errorf("layer %d has no key/value pool", layer)
	}
	pool := g.kvmap.Pool[layer]
	return p.CheckHeld(pool, window, g.kv[pool].geom.blockSize)
}

// layerKV returns the geometry of layer's pool and the layer's place in it.
func (g *Backend) layerKV(layer int) (kvGeom, int) {
	return g.kv[g.kvmap.Pool[layer]].geom, g.kvmap.Index[layer]
}

// Copy implements kvcache.Storage: the slot copies run on the device, in order.
func (kv *deviceKV) Copy(pairs []int32) error {
	if len(pairs) == 0 {
		return nil
	}
	return kv.g.do(func(b deviceOps) error {
		if err := kv.pairs.fit(b, max(int64(4*len(pairs)), 4096), "key/value copies"); err != nil {
			return err
		}
		if err := b.upload(kv.pairs.p, bytesOf(pairs)); err != nil {
			return err
		}
		return b.kvCopy(kv.geom, kv.pairs.p, len(pairs)/2)
	})
}

// free releases the pool's device memory.
func (kv *deviceKV) free(b deviceOps) error {
	var errs []error
	if kv.geom.base != 0 {
		errs = append(errs, b.free(kv.geom.base))
	}
	errs = append(errs, kv.pairs.free(b))
	return errors.Join(errs...)
}

// RandomMatrix is benchmark support (llama.NewRandom calls it): it makes a rows ×
// cols matrix of type typ whose values are uniform in ±scale, filled by the device
// itself, so that models of real sizes need no file and no copy from the host. The
// same seed gives the same values on a GPU and on the host device.
func (g *Backend) RandomMatrix(typ dtype.DType, rows, cols int, seed uint64, scale float32) (backend.Matrix, error) {
	if !supportedWeight(typ) {
		return nil, fmt.Errorf("cuda: random weights of type %s are not supported (F32, F16, BF16 and Q8_0 are)", typ)
	}
	if cols%typ.BlockSize() != 0 {
		return nil, fmt.Errorf("cuda: random %s weights need rows of whole blocks, not %d values", typ, cols)
	}
	w := wtensor{typ: typ, rows: rows, cols: cols}
	bytes := w.rowBytes() * int64(rows)
	err := g.do(func(b deviceOps) error {
		p, err := g.alloc(b, bytes)
		if err != nil {
			return fmt.Errorf("cuda: random matrix of %d × %d: %w", rows, cols, err)
		}
		w.p = p
		return b.fill(p, typ, int64(rows)*int64(cols), seed, scale, 0)
	})
	if err != nil {
		return nil, err
	}
	return &dmatrix{parts: []wtensor{w}, offs: []int{0}, inputs: []devptr{0}, input: []int{0}, rows: rows, bytes: bytes}, nil
}

// RandomVector is benchmark support (llama.NewRandom calls it): it makes a vector of
// n values uniform in offset ± scale, filled by the device.
func (g *Backend) RandomVector(n int, seed uint64, scale, offset float32) (backend.Vector, error) {
	var v dvector
	err := g.do(func(b deviceOps) error {
		p, err := g.alloc(b, int64(4*max(n, 1)))
		if err != nil {
			return fmt.Errorf("cuda: random vector of %d: %w", n, err)
		}
		v = dvector{p: p, n: n}
		return b.fill(p, dtype.F32, int64(n), seed, scale, offset)
	})
	return v, err
}
