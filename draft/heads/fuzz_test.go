package heads

import (
	"testing"
)

// FuzzHeadConfig feeds parseHeadConfig arbitrary config.json bytes: it must return a
// config that passes its own checks or an error, never panic. The seed corpus is in
// testdata/fuzz/FuzzHeadConfig (the shared heads' configs and broken variants).
func FuzzHeadConfig(f *testing.F) {
	f.Add([]byte(`{"model_type": "mlp_speculator", "vocab_size": 8192, "emb_dim": 512, "inner_dim": 512, "n_predict": 3, "tie_weights": true, "scale_input": true}`))
	f.Add([]byte(`{"model_type": "medusa", "hidden_size": 512, "vocab_size": 8192, "num_heads": 4, "num_hidden_layers": 1, "medusa_fc_bias": true, "original_lm_head": true, "truncated_vocab_size": null}`))
	f.Add([]byte(`{"model_type": "medusa", "hidden_size": -1}`))
	f.Add([]byte(`{"model_type": "llama"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := parseHeadConfig(raw)
		if err != nil {
			return
		}
		switch c.ModelType {
		case "mlp_speculator":
			if c.EmbDim <= 0 || c.InnerDim <= 0 || c.VocabSize <= 0 || c.NPredict <= 0 {
				t.Fatalf("accepted %+v", c)
			}
		case "medusa":
			if c.HiddenSize < 0 || c.VocabSize < 0 || c.NumHeads <= 0 || c.NumLayers == nil || *c.NumLayers < 0 {
				t.Fatalf("accepted %+v", c)
			}
		default:
			t.Fatalf("accepted model_type %q", c.ModelType)
		}
	})
}
