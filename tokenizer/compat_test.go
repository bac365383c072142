package tokenizer

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustJSON(t *testing.T, tokJSON, config string) *Tokenizer {
	t.Helper()
	var cfg []byte
	if config != "" {
		cfg = []byte(config)
	}
	tok, err := FromJSON([]byte(tokJSON), cfg)
	require.NoError(t, err)
	return tok
}

func TestCompatible(t *testing.T) {
	base := mustJSON(t, miniJSON, "")

	// Padding: the larger vocabulary has extra ids the smaller lacks.
	var pads []string
	for id := 8; id < 16; id++ {
		pads = append(pads, fmt.Sprintf(`"[PAD%d]": %d`, id, id))
	}
	padded := mustJSON(t, strings.Replace(miniJSON, `"<|end|>": 7}`, `"<|end|>": 7, `+strings.Join(pads, ", ")+`}`, 1), "")
	r := Compare(base, padded)
	assert.NoError(t, r.Err())
	assert.Equal(t, 8, r.DraftSize)
	assert.Equal(t, 16, r.TargetSize)
	assert.Equal(t, 7, r.Compared) // id 6 is a gap in both
	assert.NoError(t, Compatible(padded, base))

	// A token that differs is named with both texts.
	changed := strings.NewReplacer(`"abc": 5`, `"ca": 5`, `"ab c"`, `"c a"`).Replace(miniJSON)
	err := Compatible(base, mustJSON(t, changed, ""))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `1 of 7 shared ids have different tokens: id 5 draft "abc" target "ca"`)

	// Special tokens: BOS, EOS and the special flag.
	withBOS := mustJSON(t, miniJSON, `{"bos_token": "<|end|>", "eos_token": "a"}`)
	err = Compatible(base, withBOS)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `BOS differs: draft none, target 7 "<|end|>"`)
	assert.Contains(t, err.Error(), "EOS differs: draft [7], target [0 7]")
	notSpecial := mustJSON(t, strings.Replace(miniJSON, `"special": true`, `"special": false`, 1), "")
	err = Compatible(base, notSpecial)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `id 7 "<|end|>" is special only in the draft`)
}

func TestCompatibleFixtures(t *testing.T) {
	gocoder := loadTestdata(t, "gocoder")
	llama3 := loadTestdata(t, "llama3")
	// The Llama 3 fixture keeps the first 2256 gocoder tokens, then has its own.
	r := Compare(llama3, gocoder)
	require.Error(t, r.Err())
	m := r.Mismatches[0]
	assert.Equal(t, int32(2256), m.ID)
	want, _ := gocoder.Token(2256)
	assert.Equal(t, want, m.Target)
	want, _ = llama3.Token(2256)
	assert.Equal(t, want, m.Draft)
	assert.Contains(t, r.Err().Error(), fmt.Sprintf("id 2256 draft %q target %q", m.Draft, m.Target))
	assert.NoError(t, Compatible(gocoder, gocoder))
}
