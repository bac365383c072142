package specula_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula"
	"github.com/specula/specula/format/gguf"
	"github.com/specula/specula/grammar"
	"github.com/specula/specula/internal/sharedtest"
	"github.com/specula/specula/spec"
)

const (
	demoTarget = "models/gocoder-m-q8_0.gguf"
	demoDraft  = "models/gocoder-xs-q8_0.gguf"
)

// rewrite copies a GGUF file with its metadata edited.
func rewrite(t *testing.T, src, name string, edit func([]gguf.KeyValue) []gguf.KeyValue) string {
	t.Helper()
	f, err := gguf.Open(src)
	require.NoError(t, err)
	defer f.Close()
	kv := edit(append([]gguf.KeyValue(nil), f.KV...))
	tensors := make([]gguf.TensorData, len(f.Tensors))
	for i := range f.Tensors {
		tt := &f.Tensors[i]
		tensors[i] = gguf.TensorData{Name: tt.Name, Type: tt.Type, Dims: tt.Dims, Data: f.Data(tt)}
	}
	out := filepath.Join(t.TempDir(), name)
	w, err := os.Create(out)
	require.NoError(t, err)
	bw := bufio.NewWriter(w)
	require.NoError(t, gguf.Write(bw, kv, tensors, 0))
	require.NoError(t, bw.Flush())
	require.NoError(t, w.Close())
	return out
}

// TestOpenRefuses: impossible configurations fail before anything is loaded, a draft
// model with another vocabulary of the same size fails with the tokenizers' difference,
// and nothing is left open.
func TestOpenRefuses(t *testing.T) {
	otherVocab := rewrite(t, demoDraft, "other-vocab.gguf", func(kv []gguf.KeyValue) []gguf.KeyValue {
		for i, e := range kv {
			if e.Key == "tokenizer.ggml.tokens" {
				toks := append([]string(nil), e.Value.Any().([]string)...)
				toks[300], toks[301] = toks[301], toks[300]
				kv[i].Value = gguf.Strings(toks)
			}
		}
		return kv
	})
	for _, c := range []struct {
		name string
		cfg  specula.Config
		want string
	}{
		{"no model", specula.Config{}, "Config.Model: is required"},
		{"missing model", specula.Config{Model: "models/nothing.gguf"}, "no such file"},
		{"K too large", specula.Config{Model: demoTarget, K: 1000}, "Config.K: 1000"},
		{"negative threads", specula.Config{Model: demoTarget, Threads: -1}, "negative"},
		{"unknown drafter", specula.Config{Model: demoTarget, Draft: "eagle3"}, `Config.Draft: "eagle3"`},
		{"not a model", specula.Config{Model: demoTarget, Draft: "README.md"}, "README.md"},
		{"other vocabulary", specula.Config{Model: demoTarget, Draft: otherVocab}, "cannot draft for"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := specula.Open(c.cfg)
			require.Error(t, err)
			assert.Nil(t, e)
			assert.Contains(t, err.Error(), c.want)
			if c.name != "other vocabulary" {
				assert.ErrorIs(t, err, specula.ErrInvalidParameter, "a setting at fault is named")
			}
		})
	}
}

// TestDrafters: every kind of drafter Config.Draft names gives the target's greedy
// text (plain decoding's), and drafts where drafting pays.
func TestDrafters(t *testing.T) {
	ctx := context.Background()
	plain, err := specula.Open(specula.Config{Model: demoTarget, Draft: "none"})
	require.NoError(t, err)
	defer plain.Close()
	assert.Zero(t, plain.Memory().MaxDraft)
	prompt := "func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {\n"
	p := specula.Params{MaxTokens: 48, IgnoreEOS: true}
	want, err := plain.Complete(ctx, prompt, p)
	require.NoError(t, err)
	require.Len(t, want.Tokens, 48)
	for _, c := range []struct {
		draft string
		fixed bool
	}{{"", false}, {"suffix", false}, {demoDraft, false}, {demoDraft, true}, {"suffix+" + demoDraft, false}} {
		t.Run(c.draft, func(t *testing.T) {
			e, err := specula.Open(specula.Config{Model: demoTarget, Draft: c.draft, FixedK: c.fixed, K: 4 * btoi(c.fixed)})
			require.NoError(t, err)
			defer e.Close()
			got, err := e.Complete(ctx, prompt, p)
			require.NoError(t, err)
			assert.Equal(t, want.Text, got.Text)
			assert.Equal(t, want.Tokens, got.Tokens)
			assert.Equal(t, spec.FinishLength, got.Finish)
			t.Logf("%s", got.Stats)
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestStreamAndStop: streamed pieces are whole UTF-8 and add up to the text; a stop
// string ends the text before it, and is never streamed in part; seeded sampling is
// the same text twice; bad parameters fail before anything is generated.
func TestStreamAndStop(t *testing.T) {
	ctx := context.Background()
	e, err := specula.Open(specula.Config{Model: demoTarget, Draft: demoDraft})
	require.NoError(t, err)
	defer e.Close()
	prompt := "package main\n\nimport \"fmt\"\n\nfunc main() {\n"
	full, err := e.Complete(ctx, prompt, specula.Params{MaxTokens: 64, IgnoreEOS: true})
	require.NoError(t, err)
	i := strings.Index(full.Text[1:], "\n") + 1
	require.Positive(t, i, "the text has a second line: %q", full.Text)
	stop := full.Text[i : i+2]
	var pieces []string
	c, err := e.Stream(ctx, prompt, specula.Params{MaxTokens: 64, IgnoreEOS: true, Stop: []string{stop}}, func(s string) error {
		assert.True(t, utf8.ValidString(s), "%q", s)
		pieces = append(pieces, s)
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, spec.FinishStop, c.Finish)
	assert.Equal(t, full.Text[:strings.Index(full.Text, stop)], c.Text)
	assert.Equal(t, c.Text, strings.Join(pieces, ""))

	seeded := specula.Params{MaxTokens: 32, Temperature: 0.9, Seed: 11}
	a, err := e.Complete(ctx, prompt, seeded)
	require.NoError(t, err)
	b, err := e.Complete(ctx, prompt, seeded)
	require.NoError(t, err)
	assert.Equal(t, a.Tokens, b.Tokens, "a seed gives the same text")

	called := false
	for _, bad := range []specula.Params{{MaxTokens: -1}, {Temperature: -1}, {TopP: 2}, {Stop: []string{""}}, {RepetitionPenalty: -1}} {
		_, err := e.Stream(ctx, prompt, bad, func(string) error { called = true; return nil })
		assert.Error(t, err, "%+v", bad)
		assert.Error(t, bad.Validate())
	}
	assert.False(t, called, "nothing was generated for bad parameters")
	stopErr := errors.New("enough")
	_, err = e.Stream(ctx, prompt, specula.Params{MaxTokens: 20}, func(string) error { return stopErr })
	assert.ErrorIs(t, err, stopErr)
}

// TestScore: the engine's scores of a text are the decoder's of its tokens, with the
// tokens' texts (which make up the text after its first token) and alternatives, and
// the same whether the text comes as text or as its token ids; a text of no tokens,
// a text given twice, a token outside the vocabulary and a cancelled context are
// refused.
func TestScore(t *testing.T) {
	ctx := context.Background()
	e, err := specula.Open(specula.Config{Model: demoTarget, Draft: demoDraft})
	require.NoError(t, err)
	defer e.Close()
	text := "package main\n\nfunc main() {\n\tfmt.Println(1)\n}\n"
	got, err := e.Score(ctx, specula.ScoreRequest{Prompt: text, TopLogprobs: 2})
	require.NoError(t, err)
	ids := e.Tokenizer().Encode(text, e.Tokenizer().DefaultOptions())
	res, err := e.Decoder().GenerateFunc(ctx, spec.Request{Prompt: ids, PromptOnly: true, PromptLogprobs: true, TopLogprobs: 2}, nil)
	require.NoError(t, err)
	want := res[0].PromptLogprobs
	require.Len(t, got, len(ids)-1)
	byIDs, err := e.Score(ctx, specula.ScoreRequest{Tokens: ids, TopLogprobs: 2})
	require.NoError(t, err)
	assert.Equal(t, got, byIDs, "the text's token ids score as the text")
	var rest strings.Builder
	for i, s := range got {
		assert.Equal(t, ids[i+1], s.Token)
		assert.Equal(t, want[i].Logprob, s.Logprob)
		require.Len(t, s.Top, 2)
		assert.GreaterOrEqual(t, s.Top[0].Logprob, s.Top[1].Logprob)
		assert.NotEmpty(t, s.Top[0].Text)
		rest.WriteString(s.Text)
	}
	first, _ := e.Tokenizer().Piece(ids[0])
	assert.Equal(t, text, first+rest.String())
	for _, c := range []struct {
		name  string
		req   specula.ScoreRequest
		field string
	}{
		{"no text", specula.ScoreRequest{}, "Prompt"},
		{"text and tokens", specula.ScoreRequest{Prompt: text, Tokens: ids}, "Prompt"},
		{"a token outside the vocabulary", specula.ScoreRequest{Tokens: []int32{1, 1 << 20}}, "Tokens[1]"},
		{"too many alternatives", specula.ScoreRequest{Prompt: text, TopLogprobs: specula.MaxTopLogprobs + 1}, "TopLogprobs"},
	} {
		_, err = e.Score(ctx, c.req)
		pe, ok := errors.AsType[*specula.ParameterError](err)
		require.True(t, ok, "%s: %v", c.name, err)
		assert.Equal(t, c.field, pe.Field, c.name)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = e.Score(cancelled, specula.ScoreRequest{Prompt: text})
	assert.ErrorIs(t, err, context.Canceled)
}

// TestChat: a model without a chat template refuses chats with ErrNoChatTemplate; with
// one (ChatML here) the answer is the completion of the rendered prompt.
func TestChat(t *testing.T) {
	ctx := context.Background()
	e, err := specula.Open(specula.Config{Model: demoTarget})
	require.NoError(t, err)
	defer e.Close()
	msgs := []specula.Message{{Role: "system", Content: "You write Go."}, {Role: "user", Content: "A main function, please."}}
	_, err = e.Chat(ctx, msgs, specula.Params{MaxTokens: 8}, nil)
	assert.ErrorIs(t, err, specula.ErrNoChatTemplate)

	chatml, err := os.ReadFile("testdata/templates/chatml.jinja")
	require.NoError(t, err)
	withTmpl, err := specula.Open(specula.Config{Model: demoTarget, ChatTemplate: string(chatml)})
	require.NoError(t, err)
	defer withTmpl.Close()
	got, err := withTmpl.Chat(ctx, msgs, specula.Params{MaxTokens: 16, IgnoreEOS: true}, nil)
	require.NoError(t, err)
	rendered := "<|im_start|>system\nYou write Go.<|im_end|>\n<|im_start|>user\nA main function, please.<|im_end|>\n<|im_start|>assistant\n"
	want, err := withTmpl.Complete(ctx, rendered, specula.Params{MaxTokens: 16, IgnoreEOS: true})
	require.NoError(t, err)
	assert.Equal(t, want.Tokens, got.Tokens)
}

// TestFormats: constrained completions under every kind of format give text of the
// language — JSON that parses, JSON that validates against its schema (over many
// seeds, sampled), a regular expression's match, a grammar's sentence — greedy
// speculative output equal to plain decoding's; bad formats fail before any work,
// naming the problem.
func TestFormats(t *testing.T) {
	ctx := context.Background()
	e, err := specula.Open(specula.Config{Model: demoTarget, Draft: demoDraft})
	require.NoError(t, err)
	defer e.Close()
	schema := `{"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}, "count": {"type": "integer"}, "ok": {"type": "boolean"}}, "required": ["name", "count"]}`
	for _, c := range []struct {
		name   string
		format specula.Format
		check  func(string) error
	}{
		{"json", specula.Format{JSON: true}, func(s string) error { var v map[string]any; return json.Unmarshal([]byte(s), &v) }},
		{"schema", specula.Format{JSONSchema: schema}, func(s string) error {
			var v struct {
				Name  *string
				Count *int
				Ok    *bool
			}
			d := json.NewDecoder(strings.NewReader(s))
			d.DisallowUnknownFields()
			if err := d.Decode(&v); err != nil {
				return err
			}
			if v.Name == nil || v.Count == nil || utf8.RuneCountInString(*v.Name) > 10 {
				return fmt.Errorf("%q misses a required property or is too long", s)
			}
			return nil
		}},
		{"json compact", specula.Format{JSON: true, Whitespace: grammar.WhitespaceCompact}, func(s string) error {
			var b bytes.Buffer
			if err := json.Compact(&b, []byte(s)); err != nil || b.String() != s {
				return fmt.Errorf("%q is not compact JSON (%v)", s, err)
			}
			return nil
		}},
		{"json free", specula.Format{JSON: true, Whitespace: grammar.WhitespaceFree}, func(s string) error { var v map[string]any; return json.Unmarshal([]byte(s), &v) }},
		{"regex", specula.Format{Regex: `(yes|no), [0-9]{1,3} times`}, func(s string) error {
			if !regexp.MustCompile(`^(yes|no), [0-9]{1,3} times$`).MatchString(s) {
				return fmt.Errorf("%q", s)
			}
			return nil
		}},
		{"grammar", specula.Format{Grammar: "root ::= \"func \" name \"()\"\nname ::= [a-z] [a-zA-Z0-9]{0,8}"}, func(s string) error {
			if !regexp.MustCompile(`^func [a-z][a-zA-Z0-9]{0,8}\(\)$`).MatchString(s) {
				return fmt.Errorf("%q", s)
			}
			return nil
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := specula.Params{MaxTokens: 120, Format: c.format}
			got, err := e.Complete(ctx, jsonLikePrompt, p)
			require.NoError(t, err)
			want, err := e.GenerateFunc(ctx, specula.Request{Prompt: jsonLikePrompt, Params: p, NoSpeculation: true}, nil)
			require.NoError(t, err)
			assert.False(t, want.Speculative)
			assert.True(t, got.Speculative)
			assert.Equal(t, want.Tokens, got.Tokens, "greedy: plain decoding's text")
			stopped := 0
			for seed := range uint64(24) {
				p := specula.Params{MaxTokens: 120, Format: c.format, Temperature: 1, Seed: seed + 1}
				r, err := e.Complete(ctx, jsonLikePrompt, p)
				require.NoError(t, err)
				if r.Finish != spec.FinishStop {
					continue // cut by MaxTokens
				}
				stopped++
				assert.NoError(t, c.check(r.Text), "seed %d", seed)
			}
			assert.Greater(t, stopped, 12, "most samples end within MaxTokens")
		})
	}
	for _, bad := range []struct {
		f    specula.Format
		want string
	}{
		{specula.Format{JSONSchema: `{"type": "integer", "multipleOf": 2}`}, `keyword "multipleOf"`},
		{specula.Format{Grammar: "root ::= \"a"}, "line 1, column 10"},
		{specula.Format{Regex: `a(`}, "missing closing"},
		{specula.Format{JSON: true, Regex: "a"}, "at most one"},
		{specula.Format{Regex: "a", Whitespace: grammar.WhitespaceCompact}, "JSON and JSONSchema only"},
		{specula.Format{JSON: true, Whitespace: 9}, "not one of"},
	} {
		called := false
		_, err := e.Stream(ctx, "x", specula.Params{Format: bad.f}, func(string) error { called = true; return nil })
		assert.ErrorContains(t, err, bad.want)
		assert.False(t, called)
	}
	assert.Positive(t, metric(t, e, "specula_format_compile_seconds_total"))
}

// inventorySchema is a schema of many keys and enums: most of its output is forced.
const inventorySchema = `{"type": "object", "properties": {
  "id": {"type": "integer", "minimum": 1, "maximum": 9999}, "name": {"type": "string", "maxLength": 16},
  "size": {"enum": ["small", "medium", "large"]}, "colour": {"enum": ["red", "green", "blue", "black"]},
  "in_stock": {"type": "boolean"}},
  "required": ["id", "name", "size", "colour", "in_stock"], "additionalProperties": false}`

// TestForcedDraft: an engine whose Config.Draft begins with forced drafts the tokens
// a Format forces — alone, and in front of the draft model (behind prompt lookup) —
// and its output is exact: greedy, plain decoding's text under the schema; sampled,
// records of the schema; without a Format, "forced" alone drafts nothing and decodes
// as plain decoding does. "forced" anywhere but first is refused.
func TestForcedDraft(t *testing.T) {
	ctx := context.Background()
	const prompt = "// Records of the inventory, one JSON object per line.\n" +
		`{"id": 101, "name": "bolt", "size": "small", "colour": "black", "in_stock": true}` + "\n"
	format := specula.Format{JSONSchema: inventorySchema}
	valid := func(s string) error {
		var v struct {
			ID      *int    `json:"id"`
			Name    *string `json:"name"`
			Size    *string `json:"size"`
			Colour  *string `json:"colour"`
			InStock *bool   `json:"in_stock"`
		}
		d := json.NewDecoder(strings.NewReader(s))
		d.DisallowUnknownFields()
		if err := d.Decode(&v); err != nil {
			return err
		}
		if v.ID == nil || v.Name == nil || v.Size == nil || v.Colour == nil || v.InStock == nil {
			return fmt.Errorf("%q misses a required property", s)
		}
		return nil
	}
	for _, draft := range []string{"forced", "forced+" + demoDraft} {
		t.Run(draft, func(t *testing.T) {
			e, err := specula.Open(specula.Config{Model: demoTarget, Draft: draft, K: 6, FixedK: true})
			require.NoError(t, err)
			defer e.Close()
			p := specula.Params{MaxTokens: 80, Format: format}
			got, err := e.Complete(ctx, prompt, p)
			require.NoError(t, err)
			want, err := e.GenerateFunc(ctx, specula.Request{Prompt: prompt, Params: p, NoSpeculation: true}, nil)
			require.NoError(t, err)
			assert.True(t, got.Speculative)
			assert.Equal(t, want.Tokens, got.Tokens, "greedy: plain decoding's text")
			require.Equal(t, spec.FinishStop, got.Finish, "%q", got.Text)
			assert.NoError(t, valid(got.Text))
			assert.Positive(t, got.Stats.Accepted, "the forced tokens were drafted and accepted: %s", got.Stats)
			assert.Less(t, got.Stats.Steps, want.Stats.Steps, "fewer target passes than plain decoding")
			t.Logf("greedy: %d passes (plain %d), %s", got.Stats.Steps, want.Stats.Steps, got.Stats)
			stopped := 0
			for seed := range uint64(8) {
				r, err := e.Complete(ctx, prompt, specula.Params{MaxTokens: 80, Format: format, Temperature: 1, Seed: seed + 1})
				require.NoError(t, err)
				if r.Finish == spec.FinishStop {
					stopped++
					assert.NoError(t, valid(r.Text), "seed %d", seed)
				}
			}
			assert.Greater(t, stopped, 4, "most samples end within MaxTokens")
			if draft != "forced" {
				return
			}
			free := specula.Params{MaxTokens: 24, IgnoreEOS: true}
			got, err = e.Complete(ctx, prompt, free)
			require.NoError(t, err)
			want, err = e.GenerateFunc(ctx, specula.Request{Prompt: prompt, Params: free, NoSpeculation: true}, nil)
			require.NoError(t, err)
			assert.Equal(t, want.Tokens, got.Tokens)
			assert.Zero(t, got.Stats.Drafted, "nothing is forced without a Format")
		})
	}
	_, err := specula.Open(specula.Config{Model: demoTarget, Draft: "ngram+forced"})
	pe, ok := errors.AsType[*specula.ParameterError](err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, "Config.Draft", pe.Field)
	assert.ErrorContains(t, err, "forced goes first")
}

const jsonLikePrompt = `// one record, as JSON:
{"name": "bolt", "count": 12, "ok": true}
`

// TestFormatsSentencePiece: on a SentencePiece model (stories260K, Llama 2's
// tokenizer), whose first token's space the decoder drops, the decoded text of a
// constrained completion is of the language; skipped without ../shared.
func TestFormatsSentencePiece(t *testing.T) {
	path := sharedtest.Path(t, "models", "stories260K.gguf")
	e, err := specula.Open(specula.Config{Model: path})
	require.NoError(t, err)
	defer e.Close()
	re := `(Once|One day), [a-z]+ (was|had) [a-z ]{1,30}\.`
	stopped, spaced := 0, 0
	for seed := range uint64(16) {
		c, err := e.Complete(context.Background(), "Lily", specula.Params{MaxTokens: 60, Temperature: 1, Seed: seed + 1, Format: specula.Format{Regex: re}})
		require.NoError(t, err)
		if p, _ := e.Tokenizer().Piece(c.Tokens[0]); strings.HasPrefix(p, " ") {
			spaced++ // "▁Once": the model's own way to begin, allowed
		}
		if c.Finish != spec.FinishStop {
			continue
		}
		stopped++
		assert.Regexp(t, `^`+re+`$`, c.Text)
	}
	assert.Positive(t, stopped)
	assert.Positive(t, spaced, "first tokens with the dummy-prefix space are allowed")
}
