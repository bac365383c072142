package sharedtest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// CorpusTexts returns the texts the tokenizer tests encode: those of the module's
// tokenizer/testdata/corpus.json, then the golden texts of the shared tokenizers named
// (each skipping the test when absent, as [ReadTokenizerGolden] does), then the held-out
// Go prompts of the shared data where it has them.
func CorpusTexts(t testing.TB, goldens ...string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(moduleRoot(t), "tokenizer", "testdata", "corpus.json"))
	if err != nil {
		t.Fatalf("the tokenizer corpus: %v", err)
	}
	var c struct {
		Texts []string `json:"texts"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatalf("the tokenizer corpus: %v", err)
	}
	texts := c.Texts
	for _, name := range goldens {
		for _, r := range ReadTokenizerGolden(t, name).Rows {
			texts = append(texts, r.Text)
		}
	}
	return append(texts, goPrompts(t)...)
}

// goPrompts returns the prompts of the shared prompts/go-dev.jsonl, none without it.
func goPrompts(t testing.TB) []string {
	root := Root()
	if root == "" {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(root, "prompts", "go-dev.jsonl"))
	if err != nil {
		return nil
	}
	var out []string
	dec := json.NewDecoder(bytes.NewReader(data))
	for dec.More() {
		var p struct {
			Prompt string `json:"prompt"`
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("prompts/go-dev.jsonl: %v", err)
		}
		out = append(out, p.Prompt)
	}
	return out
}

// moduleRoot is the directory of the go.mod above the working directory.
func moduleRoot(t testing.TB) string {
	dir, ok := findModuleRoot()
	if !ok {
		t.Fatal("no go.mod above the working directory")
	}
	return dir
}
