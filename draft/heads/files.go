package heads

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/safetensors"
	"github.com/specula/specula/model"
)

// headConfig is the config.json of a draft head's directory, as vLLM reads the
// speculators it serves: MLPSpeculator (model_type mlp_speculator) and Medusa
// (model_type medusa).
type headConfig struct {
	ModelType string `json:"model_type"`
	VocabSize int    `json:"vocab_size"`
	// MLPSpeculator.
	EmbDim     int   `json:"emb_dim"`
	InnerDim   int   `json:"inner_dim"`
	NPredict   int   `json:"n_predict"`
	TieWeights *bool `json:"tie_weights"`
	ScaleInput *bool `json:"scale_input"`
	// Medusa.
	HiddenSize int  `json:"hidden_size"`
	NumHeads   int  `json:"num_heads"`
	NumLayers  *int `json:"num_hidden_layers"`
	// The original Medusa repository's names for the same.
	MedusaHeads    int   `json:"medusa_num_heads"`
	MedusaLayers   *int  `json:"medusa_num_layers"`
	FCBias         *bool `json:"medusa_fc_bias"`
	OriginalLMHead *bool `json:"original_lm_head"`
	Truncated      *int  `json:"truncated_vocab_size"`
}

// parseHeadConfig reads and checks a head's config.json.
func parseHeadConfig(raw []byte) (headConfig, error) {
	var c headConfig
	if err := json.Unmarshal(raw, &c); err != nil {
		return c, err
	}
	switch c.ModelType {
	case "mlp_speculator":
		switch {
		case c.EmbDim <= 0 || c.InnerDim <= 0 || c.VocabSize <= 0:
			return c, fmt.Errorf("emb_dim %d, inner_dim %d and vocab_size %d must be positive", c.EmbDim, c.InnerDim, c.VocabSize)
		case c.NPredict <= 0 || c.NPredict > 64:
			return c, fmt.Errorf("n_predict %d must be in [1, 64]", c.NPredict)
		}
	case "medusa":
		if c.NumHeads == 0 {
			c.NumHeads = c.MedusaHeads
		}
		if c.NumLayers == nil {
			c.NumLayers = c.MedusaLayers
		}
		if c.NumLayers == nil {
			one := 1 // vLLM's default
			c.NumLayers = &one
		}
		switch {
		case c.HiddenSize < 0 || c.VocabSize < 0:
			return c, fmt.Errorf("hidden_size %d and vocab_size %d must not be negative (0: the target's)", c.HiddenSize, c.VocabSize)
		case c.NumHeads <= 0 || c.NumHeads > 64:
			return c, fmt.Errorf("num_heads %d must be in [1, 64]", c.NumHeads)
		case *c.NumLayers < 0 || *c.NumLayers > 16:
			return c, fmt.Errorf("num_hidden_layers %d must be in [0, 16]", *c.NumLayers)
		case c.Truncated != nil && *c.Truncated != 0 && *c.Truncated != c.VocabSize:
			return c, fmt.Errorf("truncated_vocab_size %d is not supported (the heads must give the whole vocabulary)", *c.Truncated)
		}
	default:
		return c, fmt.Errorf("model_type %q is not a draft head this package loads (mlp_speculator, medusa; EAGLE layers load with llama.OpenEAGLE)", c.ModelType)
	}
	return c, nil
}

// flag is a boolean of a config, def when absent.
func flag(b *bool, def bool) bool {
	if b == nil {
		return def
	}
	return *b
}

// headFiles are a head directory's tensors, read with errors that name the file and
// the tensor, and taken into the backend the head computes on.
type headFiles struct {
	dir        string
	set        *safetensors.Set
	be         backend.Backend
	requantize dtype.DType
}

// openHead reads a head directory's config.json and opens its tensors, for a head of
// the given options.
func openHead(dir string, opts Options) (headConfig, *headFiles, error) {
	path := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return headConfig{}, nil, fmt.Errorf("heads: %w", err)
	}
	c, err := parseHeadConfig(raw)
	if err != nil {
		return c, nil, fmt.Errorf("heads: %s: %w", path, err)
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return c, nil, fmt.Errorf("heads: %w", err)
	}
	return c, &headFiles{dir: dir, set: set, be: opts.Backend, requantize: opts.Requantize}, nil
}

func (f *headFiles) Close() error { return f.set.Close() }

// has reports whether the directory holds the tensor.
func (f *headFiles) has(name string) bool {
	_, ok := f.set.Tensor(name)
	return ok
}

// tensor returns a float tensor of the given shape.
func (f *headFiles) tensor(name string, shape ...int64) (*safetensors.Tensor, error) {
	t, ok := f.set.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("heads: %s: tensor %q missing", f.dir, name)
	}
	if !t.Supported() || (t.DType != dtype.F32 && t.DType != dtype.F16 && t.DType != dtype.BF16) {
		return nil, fmt.Errorf("heads: %s: tensor %q has a type a head cannot use (F32, F16 and BF16 can)", f.dir, name)
	}
	if len(t.Shape) != len(shape) {
		return nil, fmt.Errorf("heads: %s: tensor %q has shape %v, want %v", f.dir, name, t.Shape, shape)
	}
	for i := range shape {
		if t.Shape[i] != shape[i] {
			return nil, fmt.Errorf("heads: %s: tensor %q has shape %v, want %v", f.dir, name, t.Shape, shape)
		}
	}
	return t, nil
}

// matrix reads a rows × cols matrix into the head's backend, requantized when the
// head is asked to be.
func (f *headFiles) matrix(name string, rows, cols int) (backend.Matrix, error) {
	if f.be == nil {
		return nil, fmt.Errorf("heads: %s: no backend to compute on: Options.Backend must be the target's (llama.Model.Backend)", f.dir)
	}
	t, err := f.tensor(name, int64(rows), int64(cols))
	if err != nil {
		return nil, err
	}
	typ, data := t.DType, t.Data
	if typ, data, err = dtype.Requantize(typ, data, cols, f.requantize); err != nil {
		return nil, fmt.Errorf("heads: %s: tensor %q: %w", f.dir, name, err)
	}
	m, err := f.be.Matrix(backend.Tensor{Name: name, Type: typ, Rows: rows, Cols: cols, Data: data})
	if err != nil {
		return nil, fmt.Errorf("heads: %s: %w", f.dir, err)
	}
	return m, nil
}

// vector reads a vector of n values.
func (f *headFiles) vector(name string, n int) ([]float32, error) {
	t, err := f.tensor(name, int64(n))
	if err != nil {
		return nil, err
	}
	v := make([]float32, n)
	if err := dtype.Dequantize(t.DType, t.Data, v); err != nil {
		return nil, fmt.Errorf("heads: %s: tensor %q: %w", f.dir, name, err)
	}
	return v, nil
}

// checkFits checks that a head of the given hidden size and vocabulary reads the
// target's states and drafts its tokens.
func checkFits(name string, hidden, vocab int, target model.Info) error {
	switch {
	case target.HiddenSize == 0:
		return fmt.Errorf("heads: %s reads the target's hidden states; target %q gives none", name, target.Name)
	case hidden != target.HiddenSize:
		return fmt.Errorf("heads: %s reads hidden states of %d values; target %q has %d", name, hidden, target.Name, target.HiddenSize)
	case vocab != target.VocabSize:
		return fmt.Errorf("heads: %s drafts from a vocabulary of %d; target %q has %d", name, vocab, target.Name, target.VocabSize)
	}
	return nil
}

// headName is how errors name a head directory.
func headName(kind, dir string) string {
	return fmt.Sprintf("%s %s", kind, strings.TrimSuffix(filepath.Base(dir), "/"))
}

// matrixBytes is the memory of the distinct matrices among ms.
func matrixBytes(ms ...[]backend.Matrix) int64 {
	var n int64
	eachMatrix(func(m backend.Matrix) { n += m.Bytes() }, ms...)
	return n
}

// matrixFootprint is where the memory of the distinct matrices among ms lies.
func matrixFootprint(ms ...[]backend.Matrix) backend.Footprint {
	var f backend.Footprint
	eachMatrix(func(m backend.Matrix) { f = f.Add(backend.FootprintOf(m)) }, ms...)
	return f
}

// eachMatrix calls do with each distinct matrix among ms, nil ones left out.
func eachMatrix(do func(backend.Matrix), ms ...[]backend.Matrix) {
	seen := map[backend.Matrix]bool{}
	for _, list := range ms {
		for _, m := range list {
			if m != nil && !seen[m] {
				seen[m] = true
				do(m)
			}
		}
	}
}
