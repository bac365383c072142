package sharedtest

import (
	"encoding/json"
	"os"
	"testing"
)

// TokenizerGolden is a golden.json of ../shared/tokenizers: texts and the ids the
// Hugging Face tokenizers' JavaScript port gives them (special tokens in the text
// parsed), without and with the tokens the model adds.
type TokenizerGolden struct {
	Source string `json:"source"`
	Rows   []struct {
		Text           string  `json:"text"`
		IDs            []int32 `json:"ids"`
		IDsWithSpecial []int32 `json:"ids_with_special"`
	} `json:"rows"`
}

// ReadTokenizerGolden reads the golden.json of tokenizer name (qwen3, llama3,
// gemma3), or skips the test when it is absent; it fails the test when the file is
// malformed or empty.
func ReadTokenizerGolden(t testing.TB, name string) TokenizerGolden {
	t.Helper()
	data, err := os.ReadFile(Path(t, "tokenizers", name, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g TokenizerGolden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatalf("tokenizers/%s/golden.json: %v", name, err)
	}
	if len(g.Rows) == 0 {
		t.Fatalf("tokenizers/%s/golden.json has no rows", name)
	}
	return g
}
