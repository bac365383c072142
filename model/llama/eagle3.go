package llama

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/specula/specula/backend"
	"github.com/specula/specula/format/dtype"
	"github.com/specula/specula/format/safetensors"
)

// EAGLE3Config is what an EAGLE-3 head's config.json says, in either layout vLLM reads:
// a one-layer Llama config with the EAGLE-3 keys beside it (architectures
// LlamaForCausalLMEagle3 or Eagle3LlamaForCausalLM, as SGLang and vLLM name it), or the
// speculators library's (speculators_model_type eagle3, the layer's config under
// transformer_layer_config, speculators_config beside it).
type EAGLE3Config struct {
	// Layer is the decoder layer's shape. Its Vocab is the target's vocabulary: the
	// token ids the head reads (vocab_size).
	Layer Config
	// DraftVocab is the number of logits the head's own output layer gives
	// (draft_vocab_size; the target's vocabulary when absent).
	DraftVocab int
	// TargetHidden is the width of each of the target's auxiliary hidden states
	// (target_hidden_size; 0: the layer's hidden size).
	TargetHidden int
	// AuxLayerIDs are the target layers whose entering residual stream the head
	// reads, vLLM's meaning of eagle_aux_hidden_state_layer_ids; nil: the default
	// for the target, (2, N/2, N−3) of its N layers.
	AuxLayerIDs []int
	// NormBeforeResidual makes the layer's residual the normed hidden input
	// (norm_before_residual, vLLM's and SGLang's flag) rather than the input itself.
	NormBeforeResidual bool
	// Speculators reports the speculators layout.
	Speculators bool
}

// eagle3LayerKeys are the keys of a one-layer Llama config the EAGLE-3 loader
// honours, or knows to be only descriptive (ids, dtypes, training settings); any
// other key is refused.
func eagle3LayerKeys() []string {
	return []string{
		"architectures", "model_type", "hidden_size", "intermediate_size", "num_attention_heads",
		"num_key_value_heads", "head_dim", "num_hidden_layers", "rms_norm_eps", "rope_theta", "rope_scaling",
		"vocab_size", "max_position_embeddings", "tie_word_embeddings", "attention_bias", "mlp_bias",
		"hidden_act", "bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype", "dtype",
		"transformers_version", "use_cache", "initializer_range", "pretraining_tp", "attention_dropout",
		"_name_or_path",
	}
}

// eagle3Keys are the EAGLE-3 keys, at the top level of either layout.
func eagle3Keys() []string {
	return []string{"draft_vocab_size", "eagle_aux_hidden_state_layer_ids", "norm_before_residual", "target_hidden_size"}
}

// speculatorsKeys are the top-level keys of the speculators layout, beside eagle3Keys.
func speculatorsKeys() []string {
	return []string{"architectures", "speculators_model_type", "speculators_version", "speculators_config",
		"transformer_layer_config", "has_no_defaults_at_init", "torch_dtype", "dtype", "transformers_version"}
}

// speculatorsConfigKeys are the keys of speculators_config.
func speculatorsConfigKeys() []string {
	return []string{"algorithm", "proposal_methods", "default_proposal_method", "verifier"}
}

// IsEAGLE3Config reports whether a config.json is an EAGLE-3 head's: its
// architectures name an EAGLE-3 Llama (any name containing "eagle3", as vLLM's and
// SGLang's do), or it is the speculators library's with speculators_model_type eagle3.
func IsEAGLE3Config(raw []byte) bool {
	var c struct {
		Architectures []string `json:"architectures"`
		Speculators   string   `json:"speculators_model_type"`
	}
	if json.Unmarshal(raw, &c) != nil {
		return false
	}
	if c.Speculators == "eagle3" {
		return true
	}
	for _, a := range c.Architectures {
		if strings.Contains(strings.ToLower(a), "eagle3") {
			return true
		}
	}
	return false
}

// ParseEAGLE3Config reads and checks an EAGLE-3 head's config.json. Every key it does
// not understand is an error that names it: a checkpoint whose config asks for what
// the loader does not do is refused, never run otherwise.
func ParseEAGLE3Config(raw []byte) (EAGLE3Config, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return EAGLE3Config{}, err
	}
	if top == nil {
		return EAGLE3Config{}, errors.New("the config is not a JSON object")
	}
	var e EAGLE3Config
	layer := raw
	if _, ok := top["speculators_model_type"]; ok {
		e.Speculators = true
		if err := refuseUnknown(top, "", speculatorsKeys(), eagle3Keys()); err != nil {
			return e, err
		}
		var sp struct {
			Type   string          `json:"speculators_model_type"`
			Layer  json.RawMessage `json:"transformer_layer_config"`
			Config json.RawMessage `json:"speculators_config"`
		}
		if err := json.Unmarshal(raw, &sp); err != nil {
			return e, err
		}
		if sp.Type != "eagle3" {
			return e, fmt.Errorf("speculators_model_type %q is not eagle3", sp.Type)
		}
		if len(sp.Layer) == 0 || string(sp.Layer) == "null" {
			return e, errors.New("transformer_layer_config is missing")
		}
		if len(sp.Config) > 0 && string(sp.Config) != "null" {
			var sc map[string]json.RawMessage
			if err := json.Unmarshal(sp.Config, &sc); err != nil {
				return e, fmt.Errorf("speculators_config: %w", err)
			}
			if err := refuseUnknown(sc, "speculators_config.", speculatorsConfigKeys()); err != nil {
				return e, err
			}
			var alg struct {
				Algorithm string `json:"algorithm"`
			}
			if err := json.Unmarshal(sp.Config, &alg); err != nil {
				return e, fmt.Errorf("speculators_config: %w", err)
			}
			if alg.Algorithm != "" && alg.Algorithm != "eagle3" {
				return e, fmt.Errorf("speculators_config.algorithm %q is not eagle3", alg.Algorithm)
			}
		}
		layer = sp.Layer
		var lk map[string]json.RawMessage
		if err := json.Unmarshal(layer, &lk); err != nil {
			return e, fmt.Errorf("transformer_layer_config: %w", err)
		}
		if err := refuseUnknown(lk, "transformer_layer_config.", eagle3LayerKeys()); err != nil {
			return e, err
		}
	} else if err := refuseUnknown(top, "", eagle3LayerKeys(), eagle3Keys()); err != nil {
		return e, err
	}
	var ek struct {
		DraftVocab         *int   `json:"draft_vocab_size"`
		AuxIDs             *[]int `json:"eagle_aux_hidden_state_layer_ids"`
		NormBeforeResidual *bool  `json:"norm_before_residual"`
		TargetHidden       *int   `json:"target_hidden_size"`
	}
	if err := json.Unmarshal(raw, &ek); err != nil {
		return e, err
	}
	var lc struct {
		Layers    int    `json:"num_hidden_layers"`
		Bias      *bool  `json:"attention_bias"`
		MLPBias   *bool  `json:"mlp_bias"`
		Tie       *bool  `json:"tie_word_embeddings"`
		Act       string `json:"hidden_act"`
		ModelType string `json:"model_type"`
	}
	if err := json.Unmarshal(layer, &lc); err != nil {
		return e, err
	}
	switch {
	case lc.Layers != 1:
		return e, fmt.Errorf("num_hidden_layers %d: an EAGLE-3 head is one decoder layer", lc.Layers)
	case lc.Bias != nil && *lc.Bias:
		return e, errors.New("attention_bias true is not supported (EAGLE-3 heads have none)")
	case lc.MLPBias != nil && *lc.MLPBias:
		return e, errors.New("mlp_bias true is not supported (EAGLE-3 heads have none)")
	case lc.Tie != nil && *lc.Tie:
		return e, errors.New("tie_word_embeddings true is not supported: an EAGLE-3 head has its own lm_head")
	case lc.Act != "" && lc.Act != "silu":
		return e, fmt.Errorf("hidden_act %q is not supported (silu is)", lc.Act)
	case lc.ModelType != "" && lc.ModelType != "llama":
		return e, fmt.Errorf("model_type %q: an EAGLE-3 layer this loader reads is a Llama layer", lc.ModelType)
	}
	h, err := parseHFConfig(layer)
	if err != nil {
		return e, err
	}
	h.Architectures = []string{"LlamaForCausalLM"}
	h.ModelType = "llama"
	c, err := hfConfigToConfig(h)
	if err == nil {
		err = c.validate()
	}
	if err != nil {
		return e, err
	}
	e.Layer = c
	e.DraftVocab = c.Vocab
	if ek.DraftVocab != nil {
		e.DraftVocab = *ek.DraftVocab
	}
	if e.DraftVocab <= 0 || e.DraftVocab > c.Vocab {
		return e, fmt.Errorf("draft_vocab_size %d must be in [1, vocab_size %d]", e.DraftVocab, c.Vocab)
	}
	if ek.TargetHidden != nil {
		if e.TargetHidden = *ek.TargetHidden; e.TargetHidden <= 0 || e.TargetHidden > 1<<16 {
			return e, fmt.Errorf("target_hidden_size %d must be in [1, 65536]", e.TargetHidden)
		}
	}
	if ek.NormBeforeResidual != nil {
		e.NormBeforeResidual = *ek.NormBeforeResidual
	}
	if ek.AuxIDs != nil {
		ids := *ek.AuxIDs
		if len(ids) == 0 || len(ids) > 16 {
			return e, fmt.Errorf("eagle_aux_hidden_state_layer_ids %v must name 1 to 16 layers", ids)
		}
		if err := checkAuxIDs(ids, 1<<20); err != nil {
			return e, err
		}
		e.AuxLayerIDs = slices.Clone(ids)
	}
	return e, nil
}

// refuseUnknown fails on the first key of m (in order) outside the lists, naming it.
func refuseUnknown(m map[string]json.RawMessage, prefix string, lists ...[]string) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		known := false
		for _, l := range lists {
			known = known || slices.Contains(l, k)
		}
		if !known {
			return fmt.Errorf("config key %q is not one the EAGLE-3 loader understands; refused rather than ignored", prefix+k)
		}
	}
	return nil
}

// checkAuxIDs checks auxiliary layer ids (vLLM's meaning) against a target of n layers.
func checkAuxIDs(ids []int, n int) error {
	for i, id := range ids {
		switch {
		case id == 0:
			return fmt.Errorf("eagle_aux_hidden_state_layer_ids %v: the stream entering layer 0 is the embedding, which a target does not keep as a state", ids)
		case id < 0 || id >= n:
			return fmt.Errorf("eagle_aux_hidden_state_layer_ids %v: layer %d is outside the target's [1, %d)", ids, id, n)
		case i > 0 && id <= ids[i-1]:
			return fmt.Errorf("eagle_aux_hidden_state_layer_ids %v must ascend, each layer once", ids)
		}
	}
	return nil
}

// DefaultAuxLayerIDs is the auxiliary layers vLLM and SGLang read of a target of n
// layers when the head's config names none: (2, n/2, n−3).
func DefaultAuxLayerIDs(n int) []int { return []int{2, n / 2, n - 3} }

// eagle3 is what an EAGLE-3 head holds beside the layer of a [Model].
type eagle3 struct {
	fc          backend.Matrix // [Dim, len(aux)·targetHidden]: the auxiliary states in
	qkvHidden   backend.Matrix // the q/k/v columns over hidden_norm(g)
	inNorm      backend.Vector // input_layernorm, over the embedding
	hiddenNorm  backend.Vector
	normBefore  bool
	d2t         []int32 // the target id of each draft id
	aux         []int32 // the target layers after which the states are read
	tokenVocab  int     // the target's vocabulary: the ids the head reads
	fcInputSize int
}

// OpenEAGLE3 loads an EAGLE-3 head from a directory laid out as vLLM loads it as
// Eagle3LlamaForCausalLM and SGLang as LlamaForCausalLMEagle3 (or in the speculators
// library's layout): config.json ([ParseEAGLE3Config]) and safetensors with fc.weight
// [H, k·H'] over the k auxiliary hidden states, the layer under midlayer.* (or
// layers.0.*) whose q/k/v read [input_layernorm(embedding), hidden_norm(g)],
// norm.weight, lm_head.weight [draft vocabulary, H] and d2t (t2d is not read), with the
// target's embedding (at targetPath) unless the head stores embed_tokens.weight.
//
// The model takes, beside each token, g — fc's output over the target's auxiliary
// states ([Model.Project]) at the first step, the layer's own pre-norm output after —
// and gives logits over the draft vocabulary ([Model.DraftTargets] maps them) and,
// as the state of StateLayers [0], that pre-norm output. Info.TokenVocab is the
// target's vocabulary.
func OpenEAGLE3(dir, targetPath string, b backend.Factory, opts Options) (*Model, error) {
	path := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	ec, err := ParseEAGLE3Config(raw)
	if err != nil {
		return nil, fmt.Errorf("llama: %s: %w", path, err)
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
	th := cmp.Or(ec.TargetHidden, ec.Layer.Dim)
	if tc.Dim != th || tc.Vocab != ec.Layer.Vocab {
		return nil, fmt.Errorf("llama: the EAGLE-3 head %s (target hidden size %d, vocabulary %d) does not fit the target %s (%d, %d)",
			dir, th, ec.Layer.Vocab, targetPath, tc.Dim, tc.Vocab)
	}
	ids := ec.AuxLayerIDs
	if ids == nil {
		ids = DefaultAuxLayerIDs(tc.Layers)
	}
	if err := checkAuxIDs(ids, tc.Layers); err != nil {
		return nil, fmt.Errorf("llama: %s for target %s of %d layers: %w", dir, targetPath, tc.Layers, err)
	}
	cfg := ec.Layer
	if opts.ContextLength > 0 {
		cfg.ContextLength = opts.ContextLength
	}
	cfg.Vocab = ec.DraftVocab
	cfg.TiedEmbeddings = false
	e := &eagle3{normBefore: ec.NormBeforeResidual, tokenVocab: ec.Layer.Vocab, fcInputSize: len(ids) * th}
	for _, id := range ids {
		e.aux = append(e.aux, int32(id-1)) // entering layer id: after layer id−1
	}
	return startHead(dir, cfg, b, opts, e, func(m *Model) error {
		return m.loadEAGLE3(head, filepath.Base(dir), tgt, opts.Requantize)
	})
}

// loadEAGLE3 takes in the head's tensors, and the target's embedding unless the head
// stores its own.
func (m *Model) loadEAGLE3(set *safetensors.Set, file string, tgt *Tensors, requantize dtype.DType) error {
	c, e := &m.cfg, m.e3
	src := hfSource{s: set}
	l := &loader{src: src, file: file, be: m.be, requantize: requantize}
	prefix := "midlayer."
	if _, ok := set.Tensor("midlayer.self_attn.q_proj.weight"); !ok {
		prefix = "layers.0." // vLLM's and the speculators library's name
	}
	e.fc = l.matrix(part{"fc.weight", c.Dim, e.fcInputSize})
	qd, kvd := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	var emb, hid []backend.Tensor
	for _, p := range []struct {
		name string
		rows int
	}{{"self_attn.q_proj.weight", qd}, {"self_attn.k_proj.weight", kvd}, {"self_attn.v_proj.weight", kvd}} {
		le, lh := l.splitColumns(prefix+p.name, p.rows, 2*c.Dim)
		emb, hid = append(emb, le), append(hid, lh)
	}
	if l.err != nil {
		return l.err
	}
	qkvE, err := stackRows("q/k/v over the embedding", emb)
	if err == nil {
		var qkvH backend.Tensor
		if qkvH, err = stackRows("q/k/v over the hidden state", hid); err == nil {
			for _, t := range []*backend.Tensor{&qkvE, &qkvH} {
				if err := l.convert(t); err != nil {
					l.fail(prefix+"self_attn", "%v", err)
				}
			}
			ly := layer{qkv: l.take(qkvE)}
			e.qkvHidden = l.take(qkvH)
			ly.o = l.matrix(part{prefix + "self_attn.o_proj.weight", c.Dim, qd})
			ly.ffnNorm = l.vector(false, part{prefix + "post_attention_layernorm.weight", c.Dim, 0})
			ly.gateUp = l.matrix(part{prefix + "mlp.gate_proj.weight", c.FFN, c.Dim}, part{prefix + "mlp.up_proj.weight", c.FFN, c.Dim})
			ly.down = l.matrix(part{prefix + "mlp.down_proj.weight", c.Dim, c.FFN})
			m.layers = append(m.layers, ly)
		}
	}
	if err != nil {
		return fmt.Errorf("llama: %s: %w", file, err)
	}
	e.inNorm = l.vector(false, part{prefix + "input_layernorm.weight", c.Dim, 0})
	e.hiddenNorm = l.vector(false, part{prefix + "hidden_norm.weight", c.Dim, 0})
	m.outNorm = l.vector(false, part{"norm.weight", c.Dim, 0})
	m.output = l.table(part{"lm_head.weight", c.Vocab, c.Dim})
	if l.err != nil {
		return l.err
	}
	if err := e.readD2T(set, file, c.Vocab); err != nil {
		return err
	}
	if _, ok := set.Tensor("embed_tokens.weight"); ok {
		m.embed = l.table(part{"embed_tokens.weight", e.tokenVocab, c.Dim})
		return l.err
	}
	if tgt.Config.Dim != c.Dim {
		return fmt.Errorf("llama: %s stores no embed_tokens.weight and its hidden size %d is not the target's %d: it cannot share the target's embedding",
			file, c.Dim, tgt.Config.Dim)
	}
	tl := &loader{src: tgt.src, file: tgt.file, be: m.be, requantize: requantize}
	m.embed = tl.table(part{tgt.Names.Embed, e.tokenVocab, c.Dim})
	return tl.err
}

// stackRows puts matrices of one float type and width on top of one another.
func stackRows(name string, ts []backend.Tensor) (backend.Tensor, error) {
	out := backend.Tensor{Name: name, Type: ts[0].Type, Cols: ts[0].Cols}
	var buf bytes.Buffer
	for _, t := range ts {
		if t.Type != out.Type || t.Cols != out.Cols {
			return out, fmt.Errorf("%s: %s is %s × %d, %s is %s × %d: the parts must agree", name, ts[0].Name, ts[0].Type, ts[0].Cols, t.Name, t.Type, t.Cols)
		}
		buf.Write(t.Data)
		out.Rows += t.Rows
	}
	out.Data = buf.Bytes()
	return out, nil
}

// readD2T reads d2t, the offset of each draft id's target id, and checks that every
// target id lies in the target's vocabulary, none twice.
func (e *eagle3) readD2T(set *safetensors.Set, file string, draftVocab int) error {
	t, ok := set.Tensor("d2t")
	if !ok {
		if draftVocab == e.tokenVocab {
			e.d2t = make([]int32, draftVocab)
			for i := range e.d2t {
				e.d2t[i] = int32(i)
			}
			return nil
		}
		return fmt.Errorf("llama: %s: tensor \"d2t\" missing: a draft vocabulary of %d beside the target's %d needs its map", file, draftVocab, e.tokenVocab)
	}
	if !t.Supported() || (t.DType != dtype.I64 && t.DType != dtype.I32) || len(t.Shape) != 1 || t.Shape[0] != int64(draftVocab) {
		return fmt.Errorf("llama: %s: tensor \"d2t\" is %s %v, want I64 [%d]", file, t.TypeName, t.Shape, draftVocab)
	}
	size := 8
	if t.DType == dtype.I32 {
		size = 4
	}
	seen := make([]bool, e.tokenVocab)
	e.d2t = make([]int32, draftVocab)
	for i := range draftVocab {
		var off int64
		if size == 8 {
			off = int64(binary.LittleEndian.Uint64(t.Data[8*i:]))
		} else {
			off = int64(int32(binary.LittleEndian.Uint32(t.Data[4*i:])))
		}
		id := int64(i) + off
		if id < 0 || id >= int64(e.tokenVocab) || seen[id] {
			return fmt.Errorf("llama: %s: d2t maps draft id %d to target id %d: outside [0, %d) or taken twice", file, i, id, e.tokenVocab)
		}
		seen[id] = true
		e.d2t[i] = int32(id)
	}
	return nil
}

// eagle3Layers is an EAGLE-3 head's pass: q/k/v over the normed embedding and the
// normed input g (fc's output or the head's own earlier output, given beside each
// token), the residual g (or its norm), the feed-forward, and the output layer after
// the final norm. The pre-norm output is the state after layer 0.
func (m *Model) eagle3Layers(ps backend.Pass) {
	e, ly := m.e3, &m.layers[0]
	ps.Embed(backend.XN, m.embed)
	ps.Norm(backend.XN, backend.XN, e.inNorm)
	ps.Mul(backend.QKV, backend.XN, ly.qkv)
	ps.Load(backend.X)
	if e.normBefore {
		ps.Norm(backend.X, backend.X, e.hiddenNorm)
		ps.MulAdd(backend.QKV, backend.X, e.qkvHidden)
	} else {
		ps.Norm(backend.XN, backend.X, e.hiddenNorm)
		ps.MulAdd(backend.QKV, backend.XN, e.qkvHidden)
	}
	ps.Attention(0, m.cfg.attn(0, nil))
	residual(ps, backend.Att, ly.o, nil)
	ps.Norm(backend.XN, backend.X, ly.ffnNorm)
	ps.Mul(backend.GateUp, backend.XN, ly.gateUp)
	ps.GLU(m.cfg.Activation)
	residual(ps, backend.Hidden, ly.down, nil)
	ps.Save(0)
	ps.Final(m.outNorm, m.output)
}

// errNotEAGLE3 is Project's and the maps' error on a model that is no EAGLE-3 head.
var errNotEAGLE3 = errors.New("llama: the model is not an EAGLE-3 head")

// Project writes fc's output for rows rows of concatenated auxiliary states (each
// [Model.ProjectInputSize] values) to out (Dim values a row): the g an EAGLE-3 head's
// first step takes beside each token, on the head's backend.
func (m *Model) Project(in []float32, rows int, out []float32) error {
	if m.e3 == nil {
		return errNotEAGLE3
	}
	if err := m.be.MulRows(m.e3.fc, in, rows, out); err != nil {
		return fmt.Errorf("llama: fc: %w", err)
	}
	return nil
}

// ProjectInputSize is the width of the auxiliary states fc reads (0: no EAGLE-3 head).
func (m *Model) ProjectInputSize() int {
	if m.e3 == nil {
		return 0
	}
	return m.e3.fcInputSize
}

// DraftTargets returns the target id of each of an EAGLE-3 head's draft ids (from
// d2t), nil for another model. The slice is the model's: read it only.
func (m *Model) DraftTargets() []int32 {
	if m.e3 == nil {
		return nil
	}
	return m.e3.d2t
}

// AuxStateLayers returns the target layers after which an EAGLE-3 head reads the
// residual stream, in [batch.Batch.StateLayers]' terms (vLLM's ids less one), nil for
// another model.
func (m *Model) AuxStateLayers() []int32 {
	if m.e3 == nil {
		return nil
	}
	return slices.Clone(m.e3.aux)
}
