package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/specula/specula/format/gguf"
)

// Load reads a tokenizer from path, which may be
//
//   - a directory holding tokenizer.json (with tokenizer_config.json and
//     generation_config.json beside it when they exist), or else tokenizer.model;
//   - a tokenizer.json file (its directory's tokenizer_config.json is read too);
//   - a SentencePiece model file (tokenizer.model);
//   - a GGUF file, whose metadata holds the vocabulary.
func Load(path string) (*Tokenizer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if st.IsDir() {
		if _, err := os.Stat(filepath.Join(path, "tokenizer.json")); err == nil {
			return loadJSON(filepath.Join(path, "tokenizer.json"))
		}
		if _, err := os.Stat(filepath.Join(path, "tokenizer.model")); err == nil {
			return loadSentencePiece(filepath.Join(path, "tokenizer.model"))
		}
		return nil, fmt.Errorf("tokenizer: %s has neither tokenizer.json nor tokenizer.model", path)
	}
	head := make([]byte, 4)
	if f, err := os.Open(path); err == nil {
		n, _ := f.Read(head)
		head = head[:n]
		f.Close()
	}
	switch {
	case bytes.Equal(head, []byte("GGUF")):
		g, err := gguf.Open(path)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		defer g.Close()
		t, err := FromGGUF(g)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
		}
		return t, nil
	case strings.HasSuffix(path, ".json") || len(bytes.TrimLeft(head, " \t\r\n")) > 0 && bytes.TrimLeft(head, " \t\r\n")[0] == '{':
		return loadJSON(path)
	}
	return loadSentencePiece(path)
}

func loadJSON(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	dir := filepath.Dir(path)
	cfg, err := readOptional(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return nil, err
	}
	gen, err := readOptional(filepath.Join(dir, "generation_config.json"))
	if err != nil {
		return nil, err
	}
	extra, err := generationEOS(gen)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", filepath.Join(dir, "generation_config.json"), err)
	}
	t, err := fromJSON(data, cfg, extra)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return t, nil
}

func loadSentencePiece(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := FromSentencePiece(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return t, nil
}

// readOptional reads a file that may be absent (nil, nil).
func readOptional(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return data, nil
}

// generationEOS reads eos_token_id (a number or a list) from generation_config.json.
func generationEOS(data []byte) ([]int32, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	var g struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	if isNull(g.EOS) {
		return nil, nil
	}
	var one int32
	if err := json.Unmarshal(g.EOS, &one); err == nil {
		return []int32{one}, nil
	}
	var list []int32
	if err := json.Unmarshal(g.EOS, &list); err != nil {
		return nil, errors.New("eos_token_id is neither a token id nor a list of them")
	}
	return list, nil
}
