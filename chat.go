package specula

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ardanlabs/jinja"
	"github.com/specula/specula/format/gguf"
)

// ChatTemplateKey is the GGUF metadata key that holds a model's chat template.
const ChatTemplateKey = "tokenizer.chat_template"

// ChatTemplate renders a conversation into a prompt with a model's Jinja chat
// template, as Hugging Face's apply_chat_template does: the variables messages,
// add_generation_prompt, bos_token and eos_token, and the raise_exception function.
// It is immutable and safe for concurrent use.
type ChatTemplate struct {
	source   string // where the template came from, for messages
	tmpl     *jinja.Template
	bos, eos string // the text of the special tokens
}

// NewChatTemplate compiles src, a Jinja chat template; source says where it came from
// (for messages), bos and eos are the text of the model's special tokens.
func NewChatTemplate(src, source, bos, eos string) (*ChatTemplate, error) {
	t, err := jinja.Compile(guardAdjacentTags(src))
	if err != nil {
		return nil, fmt.Errorf("chat template from %s: %w", source, err)
	}
	return &ChatTemplate{source: source, tmpl: t, bos: bos, eos: eos}, nil
}

// Render returns the prompt for messages, each a map with "role" and "content" (and
// whatever else the caller gives), followed by the assistant's turn. extra holds
// further template variables (chat_template_kwargs); it cannot replace messages.
// An error is the template's own (raise_exception) or a failure to render.
func (c *ChatTemplate) Render(messages []any, extra map[string]any) (out string, err error) {
	vars := map[string]any{
		"add_generation_prompt": true,
		"bos_token":             c.bos,
		"eos_token":             c.eos,
	}
	for k, v := range extra {
		vars[k] = v
	}
	vars["messages"] = messages
	defer func() {
		// The template is data from a model file: a bug it trips in the engine must
		// not take the caller down.
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("the chat template failed: %v", r)
		}
	}()
	return c.tmpl.Render(vars)
}

// BOS returns the text of the model's beginning-of-sequence token the template
// writes ("" for none): a prompt rendered with it must not get a second one.
func (c *ChatTemplate) BOS() string { return c.bos }

// ReadChatTemplate returns the chat template that comes with a model, and where it
// was found: a GGUF file's tokenizer.chat_template; for a Hugging Face directory,
// chat_template.jinja or the chat_template of tokenizer_config.json (a string, or a
// list of named templates of which "default" is taken). It returns "" without error
// when the model has none.
func ReadChatTemplate(path string) (src, source string, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", "", err
	}
	if !st.IsDir() {
		f, err := gguf.Open(path)
		if err != nil {
			return "", "", err
		}
		defer f.Close()
		if !f.Has(ChatTemplateKey) {
			return "", "", nil
		}
		s, err := f.String(ChatTemplateKey)
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", path, err)
		}
		return s, path + " (" + ChatTemplateKey + ")", nil
	}
	if b, err := os.ReadFile(filepath.Join(path, "chat_template.jinja")); err == nil {
		return string(b), filepath.Join(path, "chat_template.jinja"), nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", "", err
	}
	cfgPath := filepath.Join(path, "tokenizer_config.json")
	b, err := os.ReadFile(cfgPath)
	if errors.Is(err, os.ErrNotExist) {
		return "", "", nil
	} else if err != nil {
		return "", "", err
	}
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return "", "", fmt.Errorf("%s: %w", cfgPath, err)
	}
	src, err = parseConfigTemplate(cfg.ChatTemplate)
	if err != nil {
		return "", "", fmt.Errorf("%s: chat_template: %w", cfgPath, err)
	}
	return src, cfgPath, nil
}

// parseConfigTemplate reads tokenizer_config.json's chat_template: absent, a string,
// or a list of {"name", "template"} objects.
func parseConfigTemplate(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", errors.New("neither a string nor a list of named templates")
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	if len(named) > 0 {
		return named[0].Template, nil
	}
	return "", nil
}

// guardAdjacentTags works around a whitespace-control bug of github.com/ardanlabs/jinja:
// a tag's trimming ({%- -%}, {{- -}}, and the trim_blocks and lstrip_blocks defaults
// of block tags) is applied to the nearest text, even when another tag stands
// between, where Jinja2 applies it to the text right beside the tag or to nothing.
// Unguarded, "Effort: {{ x }}{%- endif %}" would lose the space after "Effort:", and
// "{% for m in messages %}{{ m }}\n{% endfor %}" its newlines.
//
// Wherever two tags touch, it puts between them a little text that their own
// trimming removes entirely — a newline after a block or comment tag (eaten by
// trim_blocks), a space after a right-trimming tag or before a left-trimming one — so
// the trimming finds the text it should and no other. Between an expression and a
// following block or comment tag (which Jinja2 never trims there) it puts a space and
// makes the tag trim it. Nothing inside {% raw %} blocks changes. The tags are found
// as the library's scanner finds them: strings in expressions and statements are
// skipped, comments end at the first #}.
func guardAdjacentTags(src string) string {
	var b strings.Builder
	last := 0         // src[:last] has been written
	prevEnd := -1     // where the previous tag ended
	var prevKind byte // '{', '%' or '#'
	var prevTrim bool // the previous tag ends with -}} -%} -#}
	inRaw := false
	for i := 0; i+1 < len(src); {
		if src[i] != '{' || (src[i+1] != '{' && src[i+1] != '%' && src[i+1] != '#') {
			i++
			continue
		}
		start, kind := i, src[i+1]
		closer := "}}"
		switch kind {
		case '%':
			closer = "%}"
		case '#':
			closer = "#}"
		}
		j := i + 2
		trimLeft := j < len(src) && src[j] == '-'
		if trimLeft {
			j++
		}
		bodyStart := j
		end, trimRight := -1, false
		for j < len(src) {
			c := src[j]
			if kind != '#' && (c == '\'' || c == '"') {
				for j++; j < len(src) && src[j] != c; j++ {
					if src[j] == '\\' {
						j++
					}
				}
				j++
				continue
			}
			if c == '-' && j+2 < len(src) && src[j+1:j+3] == closer {
				end, trimRight = j+3, true
				break
			}
			if j+1 < len(src) && src[j:j+2] == closer {
				end = j + 2
				break
			}
			j++
		}
		if end < 0 {
			break // unclosed: let the library report it
		}
		body := strings.TrimSpace(src[bodyStart : end-len(closer)-btoi(trimRight)])
		keyword, _, _ := strings.Cut(body, " ")
		if start == prevEnd && !inRaw {
			b.WriteString(src[last:start])
			last = start
			switch {
			case prevKind != '{' && !prevTrim:
				b.WriteString("\n") // the previous tag's trim_blocks eats it
			case prevTrim:
				b.WriteString(" ") // the previous tag's right trim eats it
			case trimLeft:
				b.WriteString(" ") // this tag's left trim eats it
			case kind != '{':
				// After an expression, a block or comment tag trims nothing; make it
				// trim a space of its own, not the text before the expression.
				b.WriteString(" ")
				b.WriteString(src[start : start+2])
				b.WriteString("-")
				last = start + 2
			}
		}
		switch {
		case kind == '%' && keyword == "raw":
			inRaw = true
		case kind == '%' && keyword == "endraw":
			inRaw = false
		}
		prevEnd, prevKind, prevTrim = end, kind, trimRight
		i = end
	}
	b.WriteString(src[last:])
	return b.String()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
