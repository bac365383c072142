// Package hfquant reads the weight formats of quantized Hugging Face checkpoints:
// GPTQ (AutoGPTQ / GPTQModel, checkpoint formats gptq and gptq_v2), AutoAWQ's GEMM
// layout, compressed-tensors' pack-quantized integers and block-wise FP8 (DeepSeek-V3,
// Qwen3-*-FP8). [ReadConfig] recognises a checkpoint's scheme from config.json's
// quantization_config (or GPTQ's quantize_config.json); [Scheme.Dense] turns the
// stored tensors of one linear layer into its dense weight matrix, [out, in], as
// float32; [Scheme.Packed] repacks an integer-coded layer into the block type that
// holds its values exactly in the fewest bytes — llama.cpp's Q4_0, specula's Q4_Z128
// or Q4_Z (4-bit codes with an integer zero per 128 or 32 inputs: AWQ, asymmetric
// GPTQ), else Q8_0 — (same codes, float16 scale per block; an act-order layer's inputs
// first sorted by group, the permutation returned with the blocks as Packing.Perm),
// for the integer kernels, and a block-wise FP8 layer into specula's
// dtype.F8_E4M3_B128 (its e4m3 codes and a float32 scale per run of 128 inputs), for
// float kernels that compute with exactly its values; [Scheme.PackedAs] repacks only
// into the types a caller allows (GGUF conversion), else says why not ([ErrNotExact]).
// [EncodeGPTQ], [EncodeAWQ] and [EncodeCompressed] write a layer's integer [Codes] in
// each format's tensors, the inverse of Dense, for test and synthetic checkpoints.
//
// The dense values are the formats' reference dequantisation formulas evaluated
// exactly: an integer code minus its zero point, times a float16 scale, needs at most
// 8 + 11 significant bits, so the float32 product is the exact product. The
// reference Python code (AutoAWQ dequantize_gemm, GPTQModel dequantize_weight,
// compressed-tensors _dequantize), and vLLM's kernels, compute the same product in
// float16 and so round it to float16 (at most half a float16 ulp of the weight);
// these functions do not, and equal a float64 reference (the known answers of the
// shared checkpoints are made so). FP8 values times their float32 block scale are
// rounded once to float32, as PyTorch's float32 product is. Only weights are read:
// activation quantization (an FP8 checkpoint's static input_scale, W8A8 schemes) is
// not applied, so activations stay float.
package hfquant

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Method is a quantization method, as quantization_config's quant_method names it.
type Method string

// The methods Dense reads.
const (
	GPTQ              Method = "gptq"
	AWQ               Method = "awq"
	CompressedTensors Method = "compressed-tensors"
	FP8               Method = "fp8"
)

// Scheme is how a checkpoint's linear layers are stored.
type Scheme struct {
	// Method is the quantization method.
	Method Method
	// Bits is the width of an integer code: 2, 4 or 8 (8 for FP8).
	Bits int
	// GroupSize is the number of consecutive inputs that share a scale; 0 for one
	// group per output row (GPTQ's group_size −1, compressed-tensors' channel
	// strategy).
	GroupSize int
	// Symmetric reports a symmetric code: compressed-tensors then stores no zero
	// point; GPTQ stores one all the same, and Dense reads it (as vLLM does).
	Symmetric bool
	// ActOrder reports GPTQ's desc_act: inputs are grouped by g_idx, not in runs.
	ActOrder bool
	// ZeroMinusOne reports GPTQ's original checkpoint format (gptq, "v1"), whose
	// stored zero points are the zero point minus one; gptq_v2 stores them as they are.
	ZeroMinusOne bool
	// Block is FP8's weight_block_size, [out, in]; zero for one scale per matrix.
	Block [2]int
	// Groups are compressed-tensors' config_groups (nil for other methods).
	Groups []CTGroup
	// Source is the file the scheme was read from, for errors.
	Source string
}

// ReadConfig reads the quantization scheme of a Hugging Face model directory: the
// quantization_config of config.json, else a quantize_config.json beside it (older
// GPTQ checkpoints). It returns nil and no error for a checkpoint that is not
// quantized.
func ReadConfig(dir string) (*Scheme, error) {
	path := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hfquant: %w", err)
	}
	var c struct {
		Q json.RawMessage `json:"quantization_config"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("hfquant: %s: %w", path, err)
	}
	if len(c.Q) == 0 || string(c.Q) == "null" {
		path = filepath.Join(dir, "quantize_config.json")
		c.Q, err = os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("hfquant: %w", err)
		}
	}
	s, err := ParseConfig(c.Q)
	if err != nil {
		return nil, fmt.Errorf("hfquant: %s: quantization_config: %w", path, err)
	}
	s.Source = path
	return s, nil
}

// rawConfig is the union of the quantization_config keys of the four methods.
type rawConfig struct {
	QuantMethod      string          `json:"quant_method"`
	Bits             *int            `json:"bits"`
	GroupSize        *int            `json:"group_size"`
	Sym              *bool           `json:"sym"`
	DescAct          bool            `json:"desc_act"`
	CheckpointFormat string          `json:"checkpoint_format"`
	IsMarlin         bool            `json:"is_marlin_format"`
	PackDtype        string          `json:"pack_dtype"`
	Version          string          `json:"version"`
	ZeroPoint        *bool           `json:"zero_point"`
	Fmt              string          `json:"fmt"`
	WeightBlockSize  []int           `json:"weight_block_size"`
	Format           string          `json:"format"`
	RawGroups        json.RawMessage `json:"config_groups"`
	Sparsity         struct {
		Format string `json:"format"`
	} `json:"sparsity_config"`
	Dynamic map[string]json.RawMessage `json:"dynamic"`
}

// ParseConfig parses a quantization_config object (or a quantize_config.json).
func ParseConfig(raw []byte) (*Scheme, error) {
	var r rawConfig
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, err
	}
	method := strings.ToLower(r.QuantMethod)
	if method == "" && r.Bits != nil {
		method = string(GPTQ) // AutoGPTQ's quantize_config.json may omit it
	}
	switch Method(method) {
	case GPTQ:
		return r.gptq()
	case AWQ:
		return r.awq()
	case CompressedTensors:
		return r.compressed()
	case FP8:
		return r.fp8()
	}
	return nil, fmt.Errorf("quant_method %q is not supported (gptq, awq, compressed-tensors and fp8 are)", r.QuantMethod)
}

// bits checks the key "bits".
func (r rawConfig) bits(allowed ...int) (int, error) {
	if r.Bits == nil {
		return 0, errors.New(`no "bits"`)
	}
	for _, b := range allowed {
		if *r.Bits == b {
			return b, nil
		}
	}
	return 0, fmt.Errorf("bits %d is not supported (%v are)", *r.Bits, allowed)
}

// group checks a group size: −1 (or absent) for one group per row, else positive.
func group(key string, g *int) (int, error) {
	switch {
	case g == nil || *g == -1:
		return 0, nil
	case *g <= 0:
		return 0, fmt.Errorf("%s %d is not positive (or −1)", key, *g)
	}
	return *g, nil
}

func (r rawConfig) gptq() (*Scheme, error) {
	s := &Scheme{Method: GPTQ, Symmetric: r.Sym == nil || *r.Sym, ActOrder: r.DescAct}
	var err error
	if s.Bits, err = r.bits(2, 4, 8); err != nil {
		return nil, err
	}
	if s.GroupSize, err = group("group_size", r.GroupSize); err != nil {
		return nil, err
	}
	if r.IsMarlin {
		return nil, errors.New("is_marlin_format: the Marlin layout is not supported (gptq and gptq_v2 are)")
	}
	switch r.CheckpointFormat {
	case "", "gptq":
		s.ZeroMinusOne = true
	case "gptq_v2":
	default:
		return nil, fmt.Errorf("checkpoint_format %q is not supported (gptq and gptq_v2 are)", r.CheckpointFormat)
	}
	if len(r.Dynamic) > 0 {
		return nil, errors.New("dynamic: GPTQModel's per-module overrides are not supported")
	}
	if r.PackDtype != "" && r.PackDtype != "int32" {
		return nil, fmt.Errorf("pack_dtype %q is not supported (int32 is)", r.PackDtype)
	}
	return s, nil
}

func (r rawConfig) awq() (*Scheme, error) {
	s := &Scheme{Method: AWQ, Symmetric: r.ZeroPoint != nil && !*r.ZeroPoint}
	var err error
	if s.Bits, err = r.bits(4); err != nil {
		return nil, err
	}
	if s.GroupSize, err = group("group_size", r.GroupSize); err != nil {
		return nil, err
	}
	if v := strings.ToLower(r.Version); v != "gemm" && v != "" {
		return nil, fmt.Errorf("version %q: AutoAWQ's %s layout is not supported (GEMM is)", r.Version, strings.ToUpper(v))
	}
	if s.Symmetric {
		return nil, errors.New("zero_point false is not supported (AWQ GEMM with zero points is)")
	}
	return s, nil
}

func (r rawConfig) fp8() (*Scheme, error) {
	if r.Fmt != "" && r.Fmt != "e4m3" {
		return nil, fmt.Errorf("fmt %q is not supported (e4m3 is)", r.Fmt)
	}
	s := &Scheme{Method: FP8, Bits: 8}
	switch len(r.WeightBlockSize) {
	case 0:
	case 2:
		if r.WeightBlockSize[0] <= 0 || r.WeightBlockSize[1] <= 0 {
			return nil, fmt.Errorf("weight_block_size %v is not positive", r.WeightBlockSize)
		}
		s.Block = [2]int{r.WeightBlockSize[0], r.WeightBlockSize[1]}
	default:
		return nil, fmt.Errorf("weight_block_size %v: want two sizes", r.WeightBlockSize)
	}
	return s, nil
}
