package synth

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"

	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/gguf"
	"github.com/specula/specula/model/quantize"
)

// Tensor is one tensor of a synthetic model: its GGUF name, type and shape.
type Tensor struct {
	Name string
	Type dtype.DType
	// Dims is the shape in ggml order, row length first.
	Dims []int64
	kind kind
}

// kind says how a tensor's values are made.
type kind int

const (
	matrix    kind = iota // random, of standard deviation 1/√cols
	norm                  // ones
	bias                  // small random values
	ropeFreqs             // the shape's rotary frequency factors
	ropeLong              // the shape's longrope long factors
	ropeShort             // the shape's longrope short factors
	headNorm              // random values around 1 (the per-head norms of Q and K)
)

// Bytes is the size of the tensor's data.
func (t Tensor) Bytes() int64 {
	rows := int64(1)
	for _, d := range t.Dims[1:] {
		rows *= d
	}
	n, _ := t.Type.Bytes(t.Dims[0])
	return n * rows
}

// Plan lists the tensors of a model of shape s in mix m, in the order Write writes
// them, with the types the mix gives them.
func Plan(s Shape, m quantize.Mix) ([]Tensor, error) {
	if err := m.Check(); err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	c := s.Config
	qd, kvd := int64(c.Heads*c.HeadDim), int64(c.KVHeads*c.HeadDim)
	d, f, v := int64(c.Dim), int64(c.FFN), int64(c.Vocab)
	var out []Tensor
	mat := func(name string, rows, cols int64) {
		out = append(out, Tensor{Name: name, Type: m.Type(name, cols, c.Layers, c.TiedEmbeddings), Dims: []int64{cols, rows}})
	}
	vec := func(name string, n int64, k kind) {
		out = append(out, Tensor{Name: name, Type: dtype.F32, Dims: []int64{n}, kind: k})
	}
	mat("token_embd.weight", v, d)
	vec("output_norm.weight", d, norm)
	if !c.TiedEmbeddings {
		mat("output.weight", v, d)
	}
	if c.RopeFreqFactors != nil {
		vec("rope_freqs.weight", int64(len(c.RopeFreqFactors)), ropeFreqs)
	}
	if c.RopeLongFactors != nil {
		vec("rope_factors_long.weight", int64(len(c.RopeLongFactors)), ropeLong)
		vec("rope_factors_short.weight", int64(len(c.RopeShortFactors)), ropeShort)
	}
	for l := range c.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		vec(p+"attn_norm.weight", d, norm)
		if c.Fused {
			mat(p+"attn_qkv.weight", qd+2*kvd, d)
		} else {
			mat(p+"attn_q.weight", qd, d)
			mat(p+"attn_k.weight", kvd, d)
			mat(p+"attn_v.weight", kvd, d)
		}
		if c.QKVBias {
			vec(p+"attn_q.bias", qd, bias)
			vec(p+"attn_k.bias", kvd, bias)
			vec(p+"attn_v.bias", kvd, bias)
		}
		if c.QKNorm {
			vec(p+"attn_q_norm.weight", int64(c.HeadDim), headNorm)
			vec(p+"attn_k_norm.weight", int64(c.HeadDim), headNorm)
		}
		mat(p+"attn_output.weight", d, qd)
		if c.PostNorms {
			vec(p+"post_attention_norm.weight", d, headNorm)
		}
		vec(p+"ffn_norm.weight", d, norm)
		if c.Fused {
			mat(p+"ffn_up.weight", 2*f, d) // gate and up, as llama.cpp's phi3 files hold them
		} else {
			mat(p+"ffn_gate.weight", f, d)
			mat(p+"ffn_up.weight", f, d)
		}
		mat(p+"ffn_down.weight", d, f)
		if c.PostNorms {
			vec(p+"post_ffw_norm.weight", d, headNorm)
		}
	}
	return out, nil
}

// Vocab is a tokenizer's vocabulary, as GGUF metadata (tokenizer.ggml.*), for the
// files Write makes.
type Vocab struct {
	kv     []gguf.KeyValue // every tokenizer.ggml key but tokens, token_type and the special ids
	tokens []string
	types  []int32
	scores []float32 // a SentencePiece ("llama") vocabulary's; nil for byte-level BPE
	bos    int64
	eos    int64 // the tokenizer's own (−1: none)
}

// VocabFrom reads the tokenizer of a GGUF file (the gocoder models in the
// repository's models/ have a byte-level BPE tokenizer of 8192 tokens), or the
// tokenizer.json of a Hugging Face directory, byte-level BPE or SentencePiece-style
// BPE as [quantize.TokenizerKV] reads it (the Qwen3, Llama 3 and Gemma 3 tokenizers
// of ../shared/tokenizers: real-scale files with real vocabularies).
func VocabFrom(path string) (*Vocab, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return vocabFromJSON(path)
	}
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	defer f.Close()
	v := &Vocab{bos: -1, eos: -1}
	if v.tokens, err = f.Strings("tokenizer.ggml.tokens"); err != nil {
		return nil, fmt.Errorf("synth: %s: %w", path, err)
	}
	if v.types, err = f.Int32s("tokenizer.ggml.token_type"); err != nil {
		return nil, fmt.Errorf("synth: %s: %w", path, err)
	}
	if len(v.types) != len(v.tokens) {
		return nil, fmt.Errorf("synth: %s: %d token types for %d tokens", path, len(v.types), len(v.tokens))
	}
	if f.Has("tokenizer.ggml.scores") {
		if v.scores, err = f.Float32s("tokenizer.ggml.scores"); err != nil {
			return nil, fmt.Errorf("synth: %s: %w", path, err)
		}
		if len(v.scores) != len(v.tokens) {
			return nil, fmt.Errorf("synth: %s: %d token scores for %d tokens", path, len(v.scores), len(v.tokens))
		}
	}
	if f.Has("tokenizer.ggml.bos_token_id") {
		b, err := f.Uint("tokenizer.ggml.bos_token_id")
		if err != nil {
			return nil, fmt.Errorf("synth: %s: %w", path, err)
		}
		v.bos = int64(b)
	}
	if f.Has("tokenizer.ggml.eos_token_id") {
		if e, err := f.Uint("tokenizer.ggml.eos_token_id"); err == nil {
			v.eos = int64(e)
		}
	}
	for _, e := range f.KV {
		switch e.Key {
		case "tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores", "tokenizer.ggml.bos_token_id",
			"tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id", "tokenizer.ggml.unknown_token_id":
		default:
			if strings.HasPrefix(e.Key, "tokenizer.") {
				v.kv = append(v.kv, e)
			}
		}
	}
	return v, nil
}

// vocabFromJSON reads a tokenizer.json as the GGUF metadata a converter writes.
func vocabFromJSON(dir string) (*Vocab, error) {
	kvs, err := quantize.TokenizerKV(dir, 0)
	if err != nil {
		return nil, fmt.Errorf("synth: %s: %w", dir, err)
	}
	v := &Vocab{bos: -1, eos: -1}
	for _, e := range kvs {
		switch e.Key {
		case "tokenizer.ggml.tokens":
			v.tokens, _ = e.Value.Any().([]string)
		case "tokenizer.ggml.token_type":
			v.types, _ = e.Value.Any().([]int32)
		case "tokenizer.ggml.scores":
			v.scores, _ = e.Value.Any().([]float32)
		case "tokenizer.ggml.bos_token_id":
			if b, ok := e.Value.Any().(uint32); ok {
				v.bos = int64(b)
			}
		case "tokenizer.ggml.eos_token_id":
			if b, ok := e.Value.Any().(uint32); ok {
				v.eos = int64(b)
			}
		case "tokenizer.ggml.padding_token_id", "tokenizer.ggml.unknown_token_id":
		default:
			v.kv = append(v.kv, e)
		}
	}
	if len(v.tokens) == 0 || len(v.types) != len(v.tokens) || v.scores != nil && len(v.scores) != len(v.tokens) {
		return nil, fmt.Errorf("synth: %s: %d tokens, %d token types, %d scores", dir, len(v.tokens), len(v.types), len(v.scores))
	}
	return v, nil
}

// controlType is llama.cpp's token type of control tokens, which text never
// tokenizes to.
const controlType = 3

// metadata returns the vocabulary padded with control tokens to n, as Qwen's own files
// pad theirs (a SentencePiece vocabulary's padding scores as low as its lowest token).
// The end-of-sequence token of a byte-level vocabulary is the first padding token,
// which random logits practically never pick, so that generation runs as long as it
// is asked to; it is the same id in every shape padded from one tokenizer, as in
// Qwen's own files, so that a small shape can draft for a large one in llama.cpp too
// (its speculative decoding refuses a pair whose special tokens differ). A vocabulary
// as large as the shape's (Llama 3's, Gemma 3's for 1B) keeps its own end-of-sequence
// token, and so does a SentencePiece vocabulary in every shape, as Gemma 3's own files
// do (1B's 262 144 tokens and 4B's 262 208 both end with <end_of_turn>): the shapes
// of one family then agree on it.
func (v *Vocab) metadata(n int) ([]gguf.KeyValue, error) {
	eos := v.eos
	if len(v.tokens) < n && (v.scores == nil || v.eos < 0) {
		eos = int64(len(v.tokens))
	}
	switch {
	case len(v.tokens) > n:
		return nil, fmt.Errorf("synth: the tokenizer has %d tokens, more than the shape's %d", len(v.tokens), n)
	case eos < 0:
		return nil, fmt.Errorf("synth: the tokenizer has the shape's %d tokens and no end-of-sequence token: nothing left to pad", n)
	}
	tokens := append(make([]string, 0, n), v.tokens...)
	types := append(make([]int32, 0, n), v.types...)
	for i := len(tokens); i < n; i++ {
		tokens = append(tokens, fmt.Sprintf("[PAD%d]", i))
		types = append(types, controlType)
	}
	kv := append([]gguf.KeyValue(nil), v.kv...)
	if v.scores != nil {
		kv = append(kv, gguf.KeyValue{Key: "tokenizer.ggml.scores", Value: gguf.Float32s(padScores(v.scores, n))})
	}
	kv = append(kv,
		gguf.KeyValue{Key: "tokenizer.ggml.tokens", Value: gguf.Strings(tokens)},
		gguf.KeyValue{Key: "tokenizer.ggml.token_type", Value: gguf.Int32s(types)},
		gguf.KeyValue{Key: "tokenizer.ggml.eos_token_id", Value: gguf.Uint32(uint32(eos))},
		gguf.KeyValue{Key: "tokenizer.ggml.padding_token_id", Value: gguf.Uint32(uint32(eos))},
	)
	if v.bos >= 0 {
		kv = append(kv, gguf.KeyValue{Key: "tokenizer.ggml.bos_token_id", Value: gguf.Uint32(uint32(v.bos))})
	}
	return kv, nil
}

// padScores returns scores padded to n with the lowest of them.
func padScores(scores []float32, n int) []float32 {
	out := append(make([]float32, 0, n), scores...)
	var low float32
	if len(scores) > 0 {
		low = slices.Min(scores)
	}
	for len(out) < n {
		out = append(out, low)
	}
	return out
}

// Write writes a model of shape s in mix m as a GGUF file to w, its weights drawn at
// random from seed: matrices of standard deviation 1/√cols, norms of ones, small
// biases. It streams: memory use does not grow with the model.
func Write(w io.Writer, s Shape, m quantize.Mix, vocab *Vocab, seed uint64) error {
	plan, err := Plan(s, m)
	if err != nil {
		return err
	}
	kv, err := header(s, m, vocab)
	if err != nil {
		return err
	}
	pools := map[poolKey]*pool{}
	tensors := make([]gguf.TensorData, len(plan))
	for i, t := range plan {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		td := gguf.TensorData{Name: t.Name, Type: t.Type, Dims: t.Dims}
		switch t.kind {
		case matrix:
			key := poolKey{t.Type, t.Dims[0]}
			if pools[key] == nil {
				if pools[key], err = newPool(t.Type, int(t.Dims[0]), seed); err != nil {
					return err
				}
			}
			p := pools[key]
			td.WriteTo = func(w io.Writer) error { return p.fill(w, t.Dims[1], rng) }
		default:
			td.Data = vector(t, s, rng)
		}
		tensors[i] = td
	}
	return gguf.Write(w, kv, tensors, 0)
}

// WriteFile writes the model to path (through a temporary file, renamed when
// complete).
func WriteFile(path string, s Shape, m quantize.Mix, vocab *Vocab, seed uint64) error {
	if err := gguf.WriteFile(path, func(w io.Writer) error { return Write(w, s, m, vocab, seed) }); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

// header is the file's metadata: the architecture's keys as llama.cpp's converter
// writes them, the file type, and the vocabulary.
func header(s Shape, m quantize.Mix, vocab *Vocab) ([]gguf.KeyValue, error) {
	if vocab == nil {
		return nil, errors.New("synth: a vocabulary is needed (VocabFrom)")
	}
	c := s.Config
	kv := c.GGUFMetadata(s.Of + " (random weights)")
	vkv, err := vocab.metadata(c.Vocab)
	if err != nil {
		return nil, err
	}
	kv = append(kv, vkv...)
	return append(kv, quantize.FileTypeKV(m)...), nil
}

// vector makes the values of a 1-D tensor.
func vector(t Tensor, s Shape, rng *rand.Rand) []byte {
	vals := make([]float32, t.Dims[0])
	switch t.kind {
	case norm:
		for i := range vals {
			vals[i] = 1
		}
	case bias:
		for i := range vals {
			vals[i] = float32(rng.NormFloat64() * 0.02)
		}
	case ropeFreqs:
		copy(vals, s.Config.RopeFreqFactors)
	case ropeLong:
		copy(vals, s.Config.RopeLongFactors)
	case ropeShort:
		copy(vals, s.Config.RopeShortFactors)
	case headNorm:
		// Within [0.5, 1.5], where w = v − 1 is exact and so is 1 + w: a Gemma
		// norm written as Hugging Face's w loads back as the same v.
		for i := range vals {
			vals[i] = float32(1 + max(-0.5, min(0.5, rng.NormFloat64()*0.2)))
		}
	}
	out, _ := dtype.Encode(dtype.F32, vals)
	return out
}

// poolKey names a pool: blocks of one type for rows of one length.
type poolKey struct {
	t    dtype.DType
	cols int64
}

// poolBlocks is how many blocks a pool quantizes: enough that rows drawn from it look
// random, few enough to make in a fraction of a second.
const poolBlocks = 4096

// pool holds blocks of one type, quantized (by the runtime's own quantizers) from
// normal values of standard deviation 1/√cols. Rows are made of blocks drawn from it
// at random, which makes a 7B-shaped file in seconds, not the many minutes the
// K-quant quantizers would take over every value.
type pool struct {
	blockBytes, rowBlocks int
	data                  []byte
}

func newPool(t dtype.DType, cols int, seed uint64) (*pool, error) {
	per := max(t.BlockSize(), 32) // the float types take 32 values at a time
	if cols%per != 0 {
		return nil, fmt.Errorf("synth: rows of %d values are not whole %s blocks", cols, t)
	}
	rng := rand.New(rand.NewPCG(seed, uint64(t)<<32|uint64(cols)))
	sd := 1 / math.Sqrt(float64(cols))
	vals := make([]float32, poolBlocks*per)
	for i := range vals {
		vals[i] = float32(rng.NormFloat64() * sd)
	}
	data, err := dtype.Encode(t, vals)
	if err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	return &pool{blockBytes: len(data) / poolBlocks, rowBlocks: cols / per, data: data}, nil
}

// fill writes rows rows of blocks drawn at random.
func (p *pool) fill(w io.Writer, rows int64, rng *rand.Rand) error {
	row := make([]byte, p.rowBlocks*p.blockBytes)
	for range rows {
		for b := range p.rowBlocks {
			i := rng.IntN(poolBlocks)
			copy(row[b*p.blockBytes:], p.data[i*p.blockBytes:(i+1)*p.blockBytes])
		}
		if _, err := w.Write(row); err != nil {
			return err
		}
	}
	return nil
}
