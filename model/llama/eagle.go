package llama

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/safetensors"
)

// OpenEAGLE loads an EAGLE draft layer from a Hugging Face-style directory as vLLM's
// eagle method loads it — config.json of a one-layer LlamaForCausalLM and
// model.safetensors with fc.weight [Dim, 2·Dim] and the layer's tensors under
// layers.0.*, no input norm and no final norm — with the embeddings and output layer
// of the target at targetPath, which it reads from there (into a copy of its own, in
// its backend). opts.ContextLength sets the layer's context, above its config's too
// (rotary embeddings have no hard limit): a drafter for a target should have the
// target's. The model takes, beside each token,
// the target's hidden state at the position before it (Info.InputSize), and its hidden
// state ([batch.Batch].States, unnormed: there is no final norm) stands in for the target's at
// the token's position, so it drafts by feeding itself.
//
// A directory whose config.json is an EAGLE-3 head's ([IsEAGLE3Config]) loads with
// [OpenEAGLE3], so that a caller given an EAGLE directory need not tell the two apart.
func OpenEAGLE(dir, targetPath string, b backend.Factory, opts Options) (*Model, error) {
	if raw, err := os.ReadFile(filepath.Join(dir, "config.json")); err == nil && IsEAGLE3Config(raw) {
		return OpenEAGLE3(dir, targetPath, b, opts)
	}
	cfg, err := ReadHFConfig(dir)
	if err != nil {
		return nil, err
	}
	head, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	defer head.Close()
	tgt, err := OpenTensors(targetPath)
	if err != nil {
		return nil, err
	}
	defer tgt.Close()
	tc := tgt.Config
	if tc.Dim != cfg.Dim || tc.Vocab != cfg.Vocab {
		return nil, fmt.Errorf("llama: the EAGLE layer %s (hidden size %d, vocabulary %d) does not fit the target %s (%d, %d)",
			dir, cfg.Dim, cfg.Vocab, targetPath, tc.Dim, tc.Vocab)
	}
	if opts.ContextLength > 0 {
		cfg.ContextLength = opts.ContextLength
	}
	_, _, _, hasOutput := tgt.src.lookup(tgt.Names.Output)
	cfg.TiedEmbeddings = tc.TiedEmbeddings || !hasOutput
	return startHead(dir, cfg, b, opts, nil, func(m *Model) error {
		return m.loadEAGLE(hfSource{s: head}, filepath.Base(dir), tgt, opts.Requantize)
	})
}

// startHead makes the model of a draft layer in dir (EAGLE's or EAGLE-3's, with e3
// for the latter) on a backend of b, loads its weights with load, and starts its
// key/value cache; the model is closed again if either fails.
func startHead(dir string, cfg Config, b backend.Factory, opts Options, e3 *eagle3, load func(*Model) error) (*Model, error) {
	be, err := newBackend(&cfg, b)
	if err != nil {
		return nil, fmt.Errorf("llama: %s: %w", dir, err)
	}
	m := &Model{cfg: cfg, name: filepath.Base(dir), be: be, invFreq: cfg.InvFreqs(), e3: e3}
	if err := load(m); err != nil {
		_ = m.Close()
		return nil, err
	}
	if err := m.startCache(opts); err != nil {
		_ = m.Close()
		return nil, fmt.Errorf("llama: %s: %w", dir, err)
	}
	return m, nil
}

// eagleNames are the tensor names of an EAGLE layer's directory.
func eagleNames() TensorNames {
	n := hfNames()
	hf := n.Layer
	n.Layer = func(i int, part string) string { return hf(i, part)[len("model."):] }
	return n
}

// loadEAGLE takes in the layer from src and the shared embeddings and output layer
// from the target's tensors.
func (m *Model) loadEAGLE(src tensorSource, file string, tgt *Tensors, requantize dtype.DType) error {
	c := &m.cfg
	l := &loader{src: src, file: file, be: m.be, requantize: requantize}
	fe, fh := l.splitColumns("fc.weight", c.Dim, 2*c.Dim)
	if l.err != nil {
		return l.err
	}
	for _, t := range []*backend.Tensor{&fe, &fh} {
		if err := l.convert(t); err != nil {
			l.fail("fc.weight", "%v", err)
			return l.err
		}
	}
	m.fcEmbed, m.fcHidden = l.take(fe), l.take(fh)
	n := eagleNames()
	qd, kvd := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	for i := range c.Layers {
		name := func(p string) string { return n.Layer(i, p) }
		ly := layer{
			qkv:     l.matrix(part{name("q"), qd, c.Dim}, part{name("k"), kvd, c.Dim}, part{name("v"), kvd, c.Dim}),
			o:       l.matrix(part{name("o"), c.Dim, qd}),
			ffnNorm: l.vector(false, part{name("ffn_norm"), c.Dim, 0}),
			gateUp:  l.matrix(part{name("gate"), c.FFN, c.Dim}, part{name("up"), c.FFN, c.Dim}),
			down:    l.matrix(part{name("down"), c.Dim, c.FFN}),
		}
		if i > 0 { // the first layer reads fc's output as it is
			ly.attnNorm = l.vector(false, part{name("attn_norm"), c.Dim, 0})
		}
		m.layers = append(m.layers, ly)
	}
	if l.err != nil {
		return l.err
	}
	tl := &loader{src: tgt.src, file: tgt.file, be: m.be, requantize: requantize}
	m.embed = tl.table(part{tgt.Names.Embed, c.Vocab, c.Dim})
	m.output = m.embed
	if !c.TiedEmbeddings {
		m.output = tl.table(part{tgt.Names.Output, c.Vocab, c.Dim})
	}
	return tl.err
}

// splitColumns reads a rows × cols matrix of a float type and cuts it into its left
// and right halves.
func (l *loader) splitColumns(name string, rows, cols int) (left, right backend.Tensor) {
	f := l.get(name, false)
	t, shape, data := f.t, f.shape, f.data
	if !f.ok || l.err != nil {
		return
	}
	if len(shape) != 2 || shape[0] != int64(rows) || shape[1] != int64(cols) {
		l.fail(name, "shape %v, want [%d %d]", shape, rows, cols)
		return
	}
	if t != dtype.F32 && t != dtype.F16 && t != dtype.BF16 {
		l.fail(name, "type %s; a matrix cut in columns must be F32, F16 or BF16", t)
		return
	}
	size, half := t.BlockBytes(), cols/2 // one value a block for the float types
	lb, rb := make([]byte, 0, rows*half*size), make([]byte, 0, rows*half*size)
	for r := range rows {
		row := data[r*cols*size : (r+1)*cols*size]
		lb, rb = append(lb, row[:half*size]...), append(rb, row[half*size:]...)
	}
	return backend.Tensor{Name: name + "[:, :dim]", Type: t, Rows: rows, Cols: half, Data: lb},
		backend.Tensor{Name: name + "[:, dim:]", Type: t, Rows: rows, Cols: half, Data: rb}
}

// take takes a tensor in as a matrix.
func (l *loader) take(t backend.Tensor) backend.Matrix {
	if l.err != nil {
		return nil
	}
	m, err := l.be.Matrix(t)
	if err != nil {
		l.fail(t.Name, "%v", err)
		return nil
	}
	return m
}
