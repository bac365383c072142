package llama

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/internal/kernels"
)

// Open loads a model from a GGUF file or a Hugging Face directory (config.json plus
// model.safetensors or a sharded model.safetensors.index.json). The files are
// memory-mapped while the weights are copied into the kernels' layout (each
// tensor's mapped pages given back as soon as it is copied), and closed after.
func Open(path string, opts Options) (*Model, error) {
	t, err := OpenTensors(path)
	if err != nil {
		return nil, err
	}
	m := &Model{cfg: t.Config, name: t.Name}
	l := &loader{src: t.src, file: t.file, progress: opts.Progress}
	err = l.load(m, t.Names)
	if cerr := t.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("llama: %s: %w", path, cerr)
	}
	if err != nil {
		return nil, err
	}
	if err := m.finish(opts); err != nil {
		_ = m.Close()
		return nil, fmt.Errorf("llama: %s: %w", path, err)
	}
	return m, nil
}

// Tensors are the weights of a GGUF file or Hugging Face directory, memory-mapped, with
// the configuration and tensor names that Open reads them with: what another runtime
// (package gpu) needs to load the same model the same way.
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
	// Layer names part of layer i: attn_norm, q, k, v, o, q_bias, k_bias, v_bias,
	// ffn_norm, gate, up or down.
	Layer func(i int, part string) string
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
// and bytes, which stay valid until Close.
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

// loader fills a Model from a tensor source, checking every shape.
type loader struct {
	src      tensorSource
	file     string
	progress func(done, total int64) // nil: none
	done     int64                   // bytes of the tensors loaded so far
	total    int64
	err      error
}

func (l *loader) fail(name, format string, args ...any) {
	if l.err == nil {
		l.err = fmt.Errorf("llama: %s: tensor %q: %s", l.file, name, fmt.Sprintf(format, args...))
	}
}

func (l *loader) get(name string, optional bool) (dtype.DType, []int64, []byte, bool) {
	t, shape, data, ok := l.src.lookup(name)
	if !ok && !optional {
		l.fail(name, "missing")
	}
	l.report(int64(len(data)))
	return t, shape, data, ok
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

// matrix loads a rows × cols weight matrix.
func (l *loader) matrix(name string, rows, cols int, optional bool) *kernels.Matrix {
	t, shape, data, ok := l.get(name, optional)
	if !ok || l.err != nil {
		return nil
	}
	if len(shape) != 2 || shape[0] != int64(rows) || shape[1] != int64(cols) {
		l.fail(name, "shape %v, want [%d %d]", shape, rows, cols)
		return nil
	}
	m, err := kernels.NewMatrix(t, rows, cols, data)
	if err != nil {
		l.fail(name, "%v", err)
		return nil
	}
	if l.src.mapped() {
		release(data) // repacked: the file's bytes are not read again
	}
	return m
}

// vector loads a 1-D tensor of n values as float32.
func (l *loader) vector(name string, n int, optional bool) []float32 {
	t, shape, data, ok := l.get(name, optional)
	if !ok || l.err != nil {
		return nil
	}
	if len(shape) != 1 || shape[0] != int64(n) {
		l.fail(name, "shape %v, want [%d]", shape, n)
		return nil
	}
	out := make([]float32, n)
	if err := kernels.Dequantize(t, data, out); err != nil {
		l.fail(name, "%v", err)
		return nil
	}
	return out
}

// load fills the weights of m, whose config is set.
func (l *loader) load(m *Model, n TensorNames) error {
	c := &m.cfg
	hd := c.HeadDim
	m.embed = l.matrix(n.Embed, c.Vocab, c.Dim, false)
	for i := range c.Layers {
		ly := layer{
			attnNorm: l.vector(n.Layer(i, "attn_norm"), c.Dim, false),
			wq:       l.matrix(n.Layer(i, "q"), c.Heads*hd, c.Dim, false),
			wk:       l.matrix(n.Layer(i, "k"), c.KVHeads*hd, c.Dim, false),
			wv:       l.matrix(n.Layer(i, "v"), c.KVHeads*hd, c.Dim, false),
			wo:       l.matrix(n.Layer(i, "o"), c.Dim, c.Heads*hd, false),
			ffnNorm:  l.vector(n.Layer(i, "ffn_norm"), c.Dim, false),
			wGate:    l.matrix(n.Layer(i, "gate"), c.FFN, c.Dim, false),
			wUp:      l.matrix(n.Layer(i, "up"), c.FFN, c.Dim, false),
			wDown:    l.matrix(n.Layer(i, "down"), c.Dim, c.FFN, false),
		}
		ly.bq = l.vector(n.Layer(i, "q_bias"), c.Heads*hd, !c.QKVBias)
		ly.bk = l.vector(n.Layer(i, "k_bias"), c.KVHeads*hd, !c.QKVBias)
		ly.bv = l.vector(n.Layer(i, "v_bias"), c.KVHeads*hd, !c.QKVBias)
		if (ly.bq == nil) != (ly.bk == nil) || (ly.bq == nil) != (ly.bv == nil) {
			l.fail(n.Layer(i, "q_bias"), "q, k and v biases must come together")
		}
		m.layers = append(m.layers, ly)
	}
	m.outNorm = l.vector(n.OutNorm, c.Dim, false)
	if _, _, _, ok := l.src.lookup(n.Output); ok && !c.TiedEmbeddings {
		m.output = l.matrix(n.Output, c.Vocab, c.Dim, false)
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
