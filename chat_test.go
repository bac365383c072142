package specula

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/ardanlabs/jinja"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula/internal/sharedtest"
	"github.com/specula/specula/tokenizer"
)

// golden is testdata/templates/golden.json: chat templates rendered by Jinja2 as
// Hugging Face's apply_chat_template does (see golden.py there).
type golden struct {
	Conversations map[string][]map[string]any
	Cases         []struct {
		Template            string
		Conversation        string
		AddGenerationPrompt bool `json:"add_generation_prompt"`
		Output              *string
		Error               *string
	}
}

func readGolden(t *testing.T) golden {
	t.Helper()
	b, err := os.ReadFile("testdata/templates/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// Chat templates render exactly as Jinja2 does with Hugging Face's
// settings: typical templates (Llama 2, 3, 3.1, Mistral, Gemma, Zephyr, Phi-3,
// ChatML, SmolLM: loops over messages, add_generation_prompt, raise_exception,
// bos_token, string methods and filters such as trim) and the whitespace control of
// tags that touch.
func TestChatTemplatesMatchJinja2(t *testing.T) {
	g := readGolden(t)
	for _, c := range g.Cases {
		src, err := os.ReadFile(filepath.Join("testdata/templates", c.Template))
		if err != nil {
			t.Fatal(err)
		}
		tmpl, err := NewChatTemplate(string(src), c.Template, "<s>", "</s>")
		if err != nil {
			t.Fatalf("%s: %v", c.Template, err)
		}
		var msgs []any
		for _, m := range g.Conversations[c.Conversation] {
			msgs = append(msgs, m)
		}
		got, err := tmpl.Render(msgs, map[string]any{"add_generation_prompt": c.AddGenerationPrompt})
		name := c.Template + "/" + c.Conversation
		switch {
		case c.Error != nil && err == nil:
			t.Errorf("%s: rendered %q, want the error %q", name, got, *c.Error)
		case c.Error != nil && err.Error() != *c.Error:
			t.Errorf("%s: error %q, want %q", name, err, *c.Error)
		case c.Output != nil && err != nil:
			t.Errorf("%s: %v", name, err)
		case c.Output != nil && got != *c.Output:
			t.Errorf("%s (add_generation_prompt %v):\n got %q\nwant %q", name, c.AddGenerationPrompt, got, *c.Output)
		}
	}
}

// Without guardAdjacentTags the library gets touching tags wrong; this test notices
// when a new version fixes that, so the guard can go.
func TestJinjaLibraryNeedsGuard(t *testing.T) {
	g := readGolden(t)
	for _, c := range g.Cases {
		if c.Template != "adjacent.jinja" || c.Conversation != "multi" || !c.AddGenerationPrompt {
			continue
		}
		src, _ := os.ReadFile("testdata/templates/adjacent.jinja")
		tmpl, err := jinja.Compile(string(src))
		if err != nil {
			t.Fatal(err)
		}
		var msgs []any
		for _, m := range g.Conversations[c.Conversation] {
			msgs = append(msgs, m)
		}
		got, err := tmpl.Render(map[string]any{"messages": msgs, "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})
		if err == nil && got == *c.Output {
			t.Log("github.com/ardanlabs/jinja now renders touching tags as Jinja2 does: guardAdjacentTags may be removed")
		} else {
			t.Logf("without the guard: %q\n            Jinja2: %q", got, *c.Output)
		}
	}
}

func TestGuardAdjacentTags(t *testing.T) {
	for in, want := range map[string]string{
		"plain text":                                 "plain text",
		"a {{ x }} b":                                "a {{ x }} b",
		"{{ x }}{{ y }}":                             "{{ x }}{{ y }}",
		"{% if a %}{{ x }}{% endif %}":               "{% if a %}\n{{ x }} {%- endif %}",
		"{%- if a -%}{{ x }}{%- endif -%}":           "{%- if a -%} {{ x }} {%- endif -%}",
		"{{ x -}}{% y %}":                            "{{ x -}} {% y %}",
		"{# c #}{{ x }}":                             "{# c #}\n{{ x }}",
		"{{ '}}{%' }}{% if %}":                       "{{ '}}{%' }} {%- if %}",
		"{% raw %}{{ a }}{{ b }}{% endraw %}{{ c }}": "{% raw %}{{ a }}{{ b }}{% endraw %}\n{{ c }}",
		"{{ unclosed":                                "{{ unclosed",
		"{":                                          "{",
	} {
		if got := guardAdjacentTags(in); got != want {
			t.Errorf("guardAdjacentTags(%q) = %q, want %q", in, got, want)
		}
	}
}

// The chat templates of ../shared/tokenizers (Qwen3, Llama 3, Gemma 3, from the
// tokenizer_config.json the models ship) render every conversation of
// chat_golden.json byte for byte as Python's jinja2 renders them the way transformers
// does — with and without the generation prompt, and Qwen3's enable_thinking —
// with the special tokens' text taken from the tokenizer, as Open takes it.
func TestSharedChatTemplatesGolden(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3", "gemma3"} {
		t.Run(name, func(t *testing.T) {
			dir := sharedtest.Path(t, "tokenizers", name)
			tok, err := tokenizer.Load(dir)
			require.NoError(t, err)
			src, source, err := ReadChatTemplate(dir)
			require.NoError(t, err)
			require.NotEmpty(t, src, "no chat template in %s", dir)
			var bos, eos string
			if id, ok := tok.BOS(); ok {
				bos = tok.Decode([]int32{id})
			}
			if ids := tok.EOS(); len(ids) > 0 {
				eos = tok.Decode(ids[:1])
			}
			tmpl, err := NewChatTemplate(src, source, bos, eos)
			require.NoError(t, err)
			data, err := os.ReadFile(sharedtest.Path(t, "tokenizers", name, "chat_golden.json"))
			require.NoError(t, err)
			var g struct {
				Rows []struct {
					Messages            []any          `json:"messages"`
					AddGenerationPrompt bool           `json:"add_generation_prompt"`
					Kwargs              map[string]any `json:"kwargs"`
					Text                string         `json:"text"`
				} `json:"rows"`
			}
			require.NoError(t, json.Unmarshal(data, &g))
			require.NotEmpty(t, g.Rows)
			for i, r := range g.Rows {
				extra := map[string]any{"add_generation_prompt": r.AddGenerationPrompt}
				for k, v := range r.Kwargs {
					extra[k] = v
				}
				got, err := tmpl.Render(r.Messages, extra)
				require.NoError(t, err, "row %d", i)
				assert.Equal(t, r.Text, got, "row %d (add_generation_prompt %v, %v)", i, r.AddGenerationPrompt, r.Kwargs)
			}
		})
	}
}
