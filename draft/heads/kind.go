package heads

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/specula/specula/format/safetensors"
)

// Kind is what a drafter's path holds, as [Detect] tells it.
type Kind string

// The kinds of drafter paths.
const (
	// KindModel is a language model — a GGUF file, or a Hugging Face directory of a
	// whole model — which drafts as a draft model ([draft.SmallModel]).
	KindModel Kind = "model"
	// KindEAGLE is an EAGLE draft layer ([NewEAGLE], run by llama.OpenEAGLE).
	KindEAGLE Kind = "eagle"
	// KindEAGLE3 is an EAGLE-3 head ([NewEAGLE3], run by llama.OpenEAGLE3, which
	// llama.OpenEAGLE calls for one). A path asked for as eagle:PATH may hold one.
	KindEAGLE3 Kind = "eagle3"
	// KindMedusa is Medusa heads ([OpenMedusa]).
	KindMedusa Kind = "medusa"
	// KindMLP is an MLPSpeculator ([OpenMLPSpeculator]).
	KindMLP Kind = "mlp"
)

// Describe names what a path of kind k holds, for messages: "a full model", "an
// EAGLE layer", "a Medusa head", "an MLPSpeculator head".
func (k Kind) Describe() string {
	switch k {
	case KindModel:
		return "a full model"
	case KindEAGLE:
		return "an EAGLE layer"
	case KindEAGLE3:
		return "an EAGLE-3 head"
	case KindMedusa:
		return "a Medusa head"
	case KindMLP:
		return "an MLPSpeculator head"
	}
	return fmt.Sprintf("kind %q", string(k))
}

// Resolve reads a drafter's path as programs take it — KIND:PATH, with KIND one of
// model, eagle, eagle3, medusa and mlp, or a bare PATH — and returns its kind and path. A bare
// path's kind is detected ([Detect]); a path given with a kind must hold that kind,
// and the error says what it holds instead ("… is a full model: did you mean
// model:…?").
func Resolve(s string) (Kind, string, error) {
	asked, path, named := cutKind(s)
	if !named {
		kind, err := Detect(s)
		return kind, s, err
	}
	kind, err := Detect(path)
	if err != nil {
		return "", path, err
	}
	if kind != asked && (asked != KindEAGLE || kind != KindEAGLE3) { // eagle:PATH takes either EAGLE
		return "", path, fmt.Errorf("heads: %s is %s, not %s: did you mean %s:%s?", path, kind.Describe(), asked.Describe(), kind, path)
	}
	return kind, path, nil
}

// cutKind splits KIND:PATH; a string that begins with no kind is a path (which may
// hold a colon of its own, as a Windows drive does).
func cutKind(s string) (Kind, string, bool) {
	prefix, path, ok := strings.Cut(s, ":")
	if !ok {
		return "", s, false
	}
	switch k := Kind(prefix); k {
	case KindModel, KindEAGLE, KindEAGLE3, KindMedusa, KindMLP:
		return k, path, true
	}
	return "", s, false
}

// Detect says what path holds, from its config and the names of its tensors, without
// reading weights: a GGUF file is a model; a directory is the head its config.json's
// model_type names (mlp_speculator, medusa, eagle), an EAGLE-3 head when its
// architectures name one (LlamaForCausalLMEagle3, Eagle3LlamaForCausalLM: any name
// containing "eagle3") or its speculators_model_type is eagle3, an EAGLE layer when it holds
// fc.weight (an EAGLE layer's config is that of a one-layer Llama), and a model
// otherwise. A path that is none of these is an error that says what it is.
func Detect(path string) (Kind, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("heads: %w", err)
	}
	if !st.IsDir() {
		return detectFile(path)
	}
	cfgPath := filepath.Join(path, "config.json")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return "", fmt.Errorf("heads: %s is a directory without a readable config.json, neither a model's nor a draft head's: %w", path, err)
	}
	var c struct {
		ModelType     string   `json:"model_type"`
		Architectures []string `json:"architectures"`
		Speculators   string   `json:"speculators_model_type"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return "", fmt.Errorf("heads: %s: %w", cfgPath, err)
	}
	if c.Speculators == "eagle3" {
		return KindEAGLE3, nil
	}
	for _, a := range c.Architectures {
		if strings.Contains(strings.ToLower(a), "eagle3") {
			return KindEAGLE3, nil
		}
	}
	switch c.ModelType {
	case "mlp_speculator":
		return KindMLP, nil
	case "medusa":
		return KindMedusa, nil
	case "eagle":
		return KindEAGLE, nil
	}
	if hasTensor(path, "fc.weight") {
		return KindEAGLE, nil
	}
	return KindModel, nil
}

// detectFile says what a file holds: a GGUF file is a model, nothing else drafts.
func detectFile(path string) (Kind, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("heads: %w", err)
	}
	defer f.Close()
	magic := make([]byte, 4)
	if _, err := io.ReadFull(f, magic); err != nil || string(magic) != "GGUF" {
		return "", fmt.Errorf("heads: %s is a file but not a GGUF model: a draft model is a GGUF file or a Hugging Face directory, a draft head a directory", path)
	}
	return KindModel, nil
}

// hasTensor reports whether the safetensors files of dir hold the tensor (false when
// they cannot be read: the loader then says why).
func hasTensor(dir, name string) bool {
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return false
	}
	defer set.Close()
	_, ok := set.Tensor(name)
	return ok
}
