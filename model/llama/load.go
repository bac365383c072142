package llama

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/format/dtype"
)

// Open loads a model from a GGUF file or a Hugging Face directory (config.json plus
// model.safetensors or a sharded model.safetensors.index.json) onto the backend that b
// makes: cpu.Factory(threads) (package backend/cpu) for the CPU, gpu.Factory(dev, …)
// (package gpu) for a GPU. The model does not choose its backend: it is given one.
// The files are memory-mapped while the backend takes the weights in (each tensor's
// mapped pages given back as soon as it is taken), and closed after.
func Open(path string, b backend.Factory, opts Options) (*Model, error) {
	t, err := OpenTensors(path)
	if err != nil {
		return nil, err
	}
	m, err := build(t, b, opts)
	if cerr := t.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("llama: %s: %w", path, cerr)
	}
	if err != nil {
		if m != nil {
			_ = m.Close()
		}
		return nil, err
	}
	return m, nil
}

// build makes the model of t on the backend b makes.
func build(t *Tensors, b backend.Factory, opts Options) (*Model, error) {
	c := t.Config
	c.limitContext(opts.ContextLength)
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("llama: %s: %w", t.file, err)
	}
	be, err := newBackend(&c, b)
	if err != nil {
		return nil, fmt.Errorf("llama: %s: %w", t.file, err)
	}
	m := &Model{cfg: c, name: t.Name, be: be, invFreq: c.InvFreqs(), localInvFreq: c.LocalInvFreqs()}
	l := &loader{src: t.src, file: t.file, be: be, progress: opts.Progress, requantize: opts.Requantize, normShift: t.Names.NormShift}
	if err := l.load(m, t.Names); err != nil {
		return m, err
	}
	if err := m.startCache(opts); err != nil {
		return m, fmt.Errorf("llama: %s: %w", t.file, err)
	}
	return m, nil
}

// Tensors are the weights of a GGUF file or Hugging Face directory, memory-mapped, with
// the configuration and tensor names that Open reads them with: for programs that read
// a model's shape or tensors without loading it.
type Tensors struct {
	// Config is the model's shape, read and checked as Open reads it.
	Config Config
	// Name is the model's name: a GGUF file's general.name, else the file or
	// directory name.
	Name string
	// Names are the tensor names of the file's format.
	Names TensorNames

	src    tensorSource
	file   string
	closer io.Closer
}

// TensorNames maps the parts of a model to the tensor names of one file format.
type TensorNames struct {
	Embed, OutNorm, Output string
	// Layer names part of layer i: attn_norm, q, k, v (or qkv, fused), o, q_bias,
	// k_bias, v_bias, q_norm, k_norm, post_attn_norm, ffn_norm, gate, up (or gate_up,
	// fused), down or post_ffn_norm.
	Layer func(i int, part string) string
	// NormShift is added to every norm weight as it is loaded: 1 for Hugging Face's
	// Gemma, whose norms multiply by (1 + w) (llama.cpp's converter adds the 1).
	NormShift float32
}

// OpenTensors opens the weights of a GGUF file or a Hugging Face directory.
func OpenTensors(path string) (*Tensors, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	if st.IsDir() {
		return hfTensors(path)
	}
	return ggufTensors(path)
}

// Lookup returns a tensor's type, shape (outermost first: [rows, cols] for a matrix)
// and bytes, which stay valid until Close. In a quantized Hugging Face checkpoint
// (AWQ, GPTQ, compressed-tensors, FP8) the weight of a quantized linear layer is its
// exact Q4_0, Q4_Z128, Q4_Z, Q8_0 or F8_E4M3_B128 repacking where one exists in input order
// (hfquant.Scheme.Packed), else its dense F32 matrix (also for an act-order layer,
// whose repacking has its columns permuted: a model loads that one, Lookup gives the
// columns in input order), computed on each call; a malformed one is not found (Open
// says why). Q4_Z, Q4_Z128 and F8_E4M3_B128 are specula's own types: a GGUF writer refuses
// them.
func (t *Tensors) Lookup(name string) (typ dtype.DType, shape []int64, data []byte, ok bool) {
	return t.src.lookup(name)
}

// Close unmaps the files.
func (t *Tensors) Close() error { return t.closer.Close() }

// tensorSource is a file's tensors as the loaders see them: name, type, shape
// (outermost first, as [rows, cols] for a matrix) and bytes.
type tensorSource interface {
	lookup(name string) (t dtype.DType, shape []int64, data []byte, ok bool)
	mapped() bool // the bytes are memory-mapped from the files
	size() int64  // the bytes of all the tensors
}

// checkedSource is a tensorSource some of whose tensors are computed from others (a
// quantized layer's dense weight): a lookup can fail with an error of its own, and a
// computed tensor's bytes are not the file's.
type checkedSource interface {
	lookupChecked(name string) (found, error)
}

// found is a tensor a checkedSource found.
type found struct {
	t        dtype.DType
	shape    []int64
	data     []byte
	ok       bool
	computed bool  // data is not the file's bytes
	stored   int64 // bytes of the file it was read from
	// perm is the input each column of a repacked act-order layer multiplies
	// (hfquant.Packing.Perm); nil: the columns are in input order.
	perm []int32
}

// loader fills a Model from a tensor source, checking every shape.
type loader struct {
	src        tensorSource
	file       string
	be         backend.Backend
	requantize dtype.DType             // float matrices converted to this type at load; 0: none
	normShift  float32                 // added to norm weights (TensorNames.NormShift)
	progress   func(done, total int64) // nil: none
	done       int64                   // bytes of the tensors loaded so far
	total      int64
	err        error
}

func (l *loader) fail(name, format string, args ...any) {
	if l.err == nil {
		l.err = fmt.Errorf("llama: %s: tensor %q: %s", l.file, name, fmt.Sprintf(format, args...))
	}
}

func (l *loader) get(name string, optional bool) found {
	var f found
	if cs, isChecked := l.src.(checkedSource); isChecked {
		var err error
		if f, err = cs.lookupChecked(name); err != nil {
			if l.err == nil {
				l.err = fmt.Errorf("llama: %s: tensor %q: %w", l.file, name, err)
			}
			return found{}
		}
	} else {
		f.t, f.shape, f.data, f.ok = l.src.lookup(name)
		f.stored = int64(len(f.data))
	}
	if !f.ok && !optional {
		l.fail(name, "missing")
	}
	l.report(f.stored)
	return f
}

// report adds n bytes to the bytes loaded, and tells the progress callback about
// every 1 % of the total.
func (l *loader) report(n int64) {
	if l.progress == nil {
		return
	}
	if l.total == 0 {
		l.total = max(1, l.src.size())
		l.progress(0, l.total)
	}
	before := l.done
	l.done = min(l.done+n, l.total)
	if step := max(1, l.total/100); l.done/step != before/step {
		l.progress(l.done, l.total)
	}
}

// part is one tensor of a matrix: its name and shape.
type part struct {
	name       string
	rows, cols int
}

// matrix loads the parts, side by side, as one matrix of the backend.
func (l *loader) matrix(parts ...part) backend.Matrix { return l.matrixOf(false, parts...) }

// table loads an embedding table or output matrix, whose rows are read as they are:
// its columns must be in input order (no act-order permutation).
func (l *loader) table(p part) backend.Matrix { return l.matrixOf(true, p) }

// matrixOf loads the parts as one matrix of the backend; a table's refuses a
// permutation of its columns.
func (l *loader) matrixOf(table bool, parts ...part) backend.Matrix {
	ts := make([]backend.Tensor, 0, len(parts))
	var mapped [][]byte // the file's bytes of each part (not a converted copy)
	for _, p := range parts {
		f := l.get(p.name, false)
		if !f.ok || l.err != nil {
			return nil
		}
		if len(f.shape) != 2 || f.shape[0] != int64(p.rows) || f.shape[1] != int64(p.cols) {
			l.fail(p.name, "shape %v, want [%d %d]", f.shape, p.rows, p.cols)
			return nil
		}
		if f.perm != nil && table {
			l.fail(p.name, "an embedding table or output matrix with its columns permuted (act-order)")
			return nil
		}
		bt := backend.Tensor{Name: p.name, Type: f.t, Rows: p.rows, Cols: p.cols, Data: f.data, Perm: f.perm}
		if err := l.convert(&bt); err != nil {
			l.fail(p.name, "%v", err)
			return nil
		}
		ts = append(ts, bt)
		if !f.computed {
			mapped = append(mapped, f.data)
		}
	}
	m, err := l.be.Matrix(ts...)
	if err != nil {
		l.fail(parts[0].name, "%v", err)
		return nil
	}
	if l.src.mapped() {
		for _, data := range mapped {
			release(data) // taken in: the file's bytes are not read again
		}
	}
	return m
}

// convert requantizes a float matrix when the loader is asked to.
func (l *loader) convert(t *backend.Tensor) error {
	var err error
	t.Type, t.Data, err = dtype.Requantize(t.Type, t.Data, t.Cols, l.requantize)
	return err
}

// vector loads 1-D tensors of the given lengths, side by side, as one vector of the
// backend; nil when the first is optional and missing.
func (l *loader) vector(optional bool, parts ...part) backend.Vector {
	return l.shifted(optional, 0, parts...)
}

// shifted is vector with shift added to every value.
func (l *loader) shifted(optional bool, shift float32, parts ...part) backend.Vector {
	var out []float32
	for _, p := range parts {
		f := l.get(p.name, optional)
		if !f.ok || l.err != nil {
			return nil
		}
		if len(f.shape) != 1 || f.shape[0] != int64(p.rows) {
			l.fail(p.name, "shape %v, want [%d]", f.shape, p.rows)
			return nil
		}
		v := make([]float32, p.rows)
		if err := dtype.Dequantize(f.t, f.data, v); err != nil {
			l.fail(p.name, "%v", err)
			return nil
		}
		for i := range v {
			v[i] += shift
		}
		out = append(out, v...)
	}
	v, err := l.be.Vector(out)
	if err != nil {
		l.fail(parts[0].name, "%v", err)
		return nil
	}
	return v
}

// norm loads a norm's weights, shifted by the names' NormShift.
func (l *loader) norm(name string, n int) backend.Vector {
	return l.shifted(false, l.normShift, part{name, n, 0})
}

// load fills the weights of m, whose config is set.
func (l *loader) load(m *Model, n TensorNames) error {
	c := &m.cfg
	qd, kvd := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	m.embed = l.table(part{n.Embed, c.Vocab, c.Dim})
	for i := range c.Layers {
		name := func(p string) string { return n.Layer(i, p) }
		ly := layer{
			attnNorm: l.norm(name("attn_norm"), c.Dim),
			o:        l.matrix(part{name("o"), c.Dim, qd}),
			ffnNorm:  l.norm(name("ffn_norm"), c.Dim),
			down:     l.matrix(part{name("down"), c.Dim, c.FFN}),
		}
		if c.Fused {
			ly.qkv = l.matrix(part{name("qkv"), qd + 2*kvd, c.Dim})
			ly.gateUp = l.matrix(part{name("gate_up"), 2 * c.FFN, c.Dim})
		} else {
			ly.qkv = l.matrix(part{name("q"), qd, c.Dim}, part{name("k"), kvd, c.Dim}, part{name("v"), kvd, c.Dim})
			ly.gateUp = l.matrix(part{name("gate"), c.FFN, c.Dim}, part{name("up"), c.FFN, c.Dim})
		}
		if _, _, _, ok := l.src.lookup(name("q_bias")); ok || c.QKVBias {
			ly.bias = l.vector(false, part{name("q_bias"), qd, 0}, part{name("k_bias"), kvd, 0}, part{name("v_bias"), kvd, 0})
		}
		if c.QKNorm {
			ly.qNorm = l.norm(name("q_norm"), c.HeadDim)
			ly.kNorm = l.norm(name("k_norm"), c.HeadDim)
		}
		if c.PostNorms {
			ly.postAttnNorm = l.norm(name("post_attn_norm"), c.Dim)
			ly.postFFNNorm = l.norm(name("post_ffn_norm"), c.Dim)
		}
		m.layers = append(m.layers, ly)
	}
	m.outNorm = l.norm(n.OutNorm, c.Dim)
	if _, _, _, ok := l.src.lookup(n.Output); ok && !c.TiedEmbeddings {
		m.output = l.table(part{n.Output, c.Vocab, c.Dim})
	} else {
		c.TiedEmbeddings = true
		m.output = m.embed
	}
	if l.progress != nil && l.err == nil {
		l.report(0)
		l.progress(l.total, l.total)
	}
	return l.err
}

// f32bytes reads float32 values stored little-endian.
func f32bytes(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func baseName(path string) string { return filepath.Base(path) }
