package hfquant

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseConfig(t *testing.T) {
	cases := []struct {
		name, raw string
		want      *Scheme // nil: an error containing err
		err       string
	}{
		{"awq", `{"bits": 4, "group_size": 128, "modules_to_not_convert": null, "quant_method": "awq", "version": "gemm", "zero_point": true}`,
			&Scheme{Method: AWQ, Bits: 4, GroupSize: 128}, ""},
		{"gptq v1 act-order", `{"bits": 4, "checkpoint_format": "gptq", "desc_act": true, "group_size": 128, "pack_dtype": "int32", "quant_method": "gptq", "sym": false, "meta": {"x": 1}}`,
			&Scheme{Method: GPTQ, Bits: 4, GroupSize: 128, ActOrder: true, ZeroMinusOne: true}, ""},
		{"gptq v2 8-bit", `{"bits": 8, "checkpoint_format": "gptq_v2", "desc_act": false, "group_size": 128, "quant_method": "gptq", "sym": true}`,
			&Scheme{Method: GPTQ, Bits: 8, GroupSize: 128, Symmetric: true}, ""},
		{"gptq per channel, no method", `{"bits": 4, "group_size": -1, "sym": true}`,
			&Scheme{Method: GPTQ, Bits: 4, Symmetric: true, ZeroMinusOne: true}, ""},
		{"fp8", `{"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}`,
			&Scheme{Method: FP8, Bits: 8, Block: [2]int{128, 128}}, ""},
		{"fp8 per tensor", `{"activation_scheme": "static", "quant_method": "fp8"}`, &Scheme{Method: FP8, Bits: 8}, ""},
		{"compressed-tensors", `{"config_groups": {"group_0": {"format": "pack-quantized", "targets": ["Linear"], "weights": {"group_size": 128, "num_bits": 4, "strategy": "group", "symmetric": true, "type": "int"}}}, "format": "pack-quantized", "quant_method": "compressed-tensors"}`,
			&Scheme{Method: CompressedTensors, Groups: []CTGroup{{Name: "group_0", Targets: []string{"Linear"}, Bits: 4, GroupSize: 128, Symmetric: true}}}, ""},
		{"unknown method", `{"quant_method": "bitsandbytes"}`, nil, `quant_method "bitsandbytes"`},
		{"awq gemv", `{"bits": 4, "group_size": 128, "quant_method": "awq", "version": "gemv"}`, nil, `version "gemv": AutoAWQ's GEMV layout`},
		{"awq marlin", `{"bits": 4, "quant_method": "awq", "version": "marlin"}`, nil, "MARLIN layout is not supported"},
		{"awq 8-bit", `{"bits": 8, "quant_method": "awq"}`, nil, "bits 8"},
		{"gptq 3-bit", `{"bits": 3, "quant_method": "gptq"}`, nil, "bits 3"},
		{"gptq no bits", `{"quant_method": "gptq"}`, nil, `no "bits"`},
		{"gptq marlin", `{"bits": 4, "quant_method": "gptq", "checkpoint_format": "marlin"}`, nil, `checkpoint_format "marlin"`},
		{"gptq is_marlin", `{"bits": 4, "quant_method": "gptq", "is_marlin_format": true}`, nil, "is_marlin_format"},
		{"gptq int16 packs", `{"bits": 4, "quant_method": "gptq", "pack_dtype": "int16"}`, nil, `pack_dtype "int16"`},
		{"gptq group 0", `{"bits": 4, "quant_method": "gptq", "group_size": 0}`, nil, "group_size 0"},
		{"fp8 e5m2", `{"quant_method": "fp8", "fmt": "e5m2"}`, nil, `fmt "e5m2"`},
		{"fp8 block", `{"quant_method": "fp8", "weight_block_size": [128]}`, nil, "weight_block_size"},
		{"ct float", `{"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}}`, nil, `config_groups.g: format "float-quantized"`},
		{"ct tensor strategy", `{"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "tensor"}}}}`, nil, `config_groups.g.weights.strategy "tensor"`},
		{"ct bits", `{"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 3, "type": "int", "strategy": "channel"}}}}`, nil, "num_bits 3"},
		{"ct sparse", `{"quant_method": "compressed-tensors", "sparsity_config": {"format": "sparse-24-bitmask"}, "config_groups": {"g": {"format": "pack-quantized", "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "channel"}}}}`, nil, `sparsity_config.format "sparse-24-bitmask"`},
		{"gptq dynamic", `{"bits": 4, "quant_method": "gptq", "dynamic": {"-:.*down_proj": {}}}`, nil, "dynamic: GPTQModel's per-module overrides"},
		{"ct no groups", `{"quant_method": "compressed-tensors"}`, nil, "config_groups"},
		{"ct bad regex", `{"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"g": {"targets": ["re:("], "weights": {"num_bits": 4, "type": "int", "strategy": "channel"}}}}`, nil, "config_groups.g.targets"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := ParseConfig([]byte(c.raw))
			if c.want == nil {
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, s)
		})
	}
}

func TestMatchTarget(t *testing.T) {
	for _, c := range []struct {
		target, module string
		want           bool
	}{
		{"Linear", "model.layers.0.mlp.up_proj", true},
		{"re:.*proj", "model.layers.0.mlp.up_proj", true},
		{"re:.*q_proj$", "model.layers.0.mlp.up_proj", false},
		{"re:mlp", "model.layers.0.mlp.up_proj", false}, // re.match anchors at the start
		{"up_proj", "model.layers.0.mlp.up_proj", true},
		{"mlp.up_proj", "model.layers.0.mlp.up_proj", true},
		{"p_proj", "model.layers.0.mlp.up_proj", false},
	} {
		assert.Equal(t, c.want, matchTarget(c.target, c.module), "%s ~ %s", c.target, c.module)
	}
}

func TestReadConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
	write("config.json", `{"architectures": ["LlamaForCausalLM"]}`)
	s, err := ReadConfig(dir)
	require.NoError(t, err)
	assert.Nil(t, s, "not quantized")

	write("quantize_config.json", `{"bits": 4, "group_size": 128, "desc_act": false, "sym": true}`)
	s, err = ReadConfig(dir)
	require.NoError(t, err)
	assert.Equal(t, GPTQ, s.Method)
	assert.Equal(t, filepath.Join(dir, "quantize_config.json"), s.Source)

	write("config.json", `{"quantization_config": {"quant_method": "hqq"}}`)
	_, err = ReadConfig(dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(dir, "config.json")+": quantization_config: quant_method \"hqq\"")
}

// FuzzParseConfig checks that ParseConfig never panics, and that what it accepts is
// a scheme Dense knows.
func FuzzParseConfig(f *testing.F) {
	f.Add(`{"bits": 4, "group_size": 128, "quant_method": "awq", "version": "gemm", "zero_point": true}`)
	f.Add(`{"bits": 8, "checkpoint_format": "gptq_v2", "desc_act": true, "group_size": -1, "quant_method": "gptq", "sym": true}`)
	f.Add(`{"quant_method": "fp8", "weight_block_size": [128, 128]}`)
	f.Add(`{"config_groups": {"g": {"format": "pack-quantized", "targets": ["re:.*"], "weights": {"group_size": 32, "num_bits": 4, "strategy": "group", "symmetric": false, "type": "int"}}}, "quant_method": "compressed-tensors"}`)
	f.Fuzz(func(t *testing.T, raw string) {
		s, err := ParseConfig([]byte(raw))
		if err != nil {
			return
		}
		switch s.Method {
		case GPTQ, AWQ, CompressedTensors, FP8:
		default:
			t.Fatalf("accepted method %q", s.Method)
		}
		if s.Method != CompressedTensors && s.Bits != 2 && s.Bits != 4 && s.Bits != 8 {
			t.Fatalf("accepted bits %d", s.Bits)
		}
	})
}
