// Command jsonvalid measures how often json_schema requests end valid within their
// token budget under each whitespace mode of the JSON grammars: the share of
// requests that stop (not cut by max_tokens) with text that encoding/json parses
// and that validates against the schema.
//
//	go run ./examples/jsonvalid
//	go run ./examples/jsonvalid -model ../shared/models/x.gguf -draft-model none -n 10
//
// Every prompt × schema runs once per mode with the largest budget; a request asked
// with a smaller budget B draws the same tokens until B, so it ends valid within B
// exactly when the large run stopped valid within B tokens.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/specula/specula"
	"github.com/specula/specula/grammar"
	"github.com/specula/specula/spec"
)

// schemas are the formats asked for: a small record and a nested one.
var schemas = []string{
	`{"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "count": {"type": "integer"}, "ok": {"type": "boolean"}}, "required": ["name", "count", "ok"], "additionalProperties": false}`,
	`{"type": "object", "properties": {"id": {"type": "integer"}, "title": {"type": "string", "maxLength": 40}, "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4}, "owner": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "admin": {"type": "boolean"}}, "required": ["name", "admin"], "additionalProperties": false}}, "required": ["id", "title", "tags", "owner"], "additionalProperties": false}`,
}

// subjects make the prompts: one per request of a schema.
var subjects = []string{"user", "server", "job", "order", "book", "file", "task", "event", "device", "token",
	"route", "image", "query", "cache", "queue", "metric", "build", "issue", "host", "plan"}

func main() {
	target := flag.String("model", "models/gocoder-m-q8_0.gguf", "target model")
	draftModel := flag.String("draft-model", "models/gocoder-xs-q8_0.gguf", "draft model (none: plain decoding)")
	n := flag.Int("n", 10, "prompts per schema (at most 20)")
	temp := flag.Float64("temperature", 0.7, "sampling temperature (0: greedy)")
	flag.Parse()
	if err := run(*target, *draftModel, min(*n, len(subjects)), *temp); err != nil {
		fmt.Fprintln(os.Stderr, "jsonvalid:", err)
		os.Exit(1)
	}
}

// budgets are the max_tokens of the table.
var budgets = []int{64, 128, 256}

func run(target, draftModel string, n int, temp float64) error {
	cfg := specula.Config{Model: target}
	if draftModel != "none" {
		cfg.Draft = draftModel
	}
	e, err := specula.Open(cfg)
	if err != nil {
		return fmt.Errorf("open %s: %w", target, err)
	}
	defer e.Close()
	fmt.Printf("%d prompts × %d schemas, temperature %g, %s\n\n", n, len(schemas), temp, target)
	fmt.Println("| whitespace | valid ≤ 64 | valid ≤ 128 | valid ≤ 256 | mean tokens of the valid |")
	fmt.Println("|---|---|---|---|---|")
	for _, ws := range []grammar.Whitespace{grammar.WhitespaceFree, grammar.WhitespaceIndent, grammar.WhitespaceCompact} {
		row, err := measure(e, ws, n, temp)
		if err != nil {
			return err
		}
		fmt.Println(row)
	}
	return nil
}

// measure runs every prompt × schema under one mode and writes its table row.
func measure(e *specula.Engine, ws grammar.Whitespace, n int, temp float64) (string, error) {
	var lengths []int // of the requests that ended valid
	total := 0
	for si, schema := range schemas {
		for i := range n {
			c, err := e.Complete(context.Background(), prompt(si, subjects[i]), specula.Params{
				MaxTokens: budgets[len(budgets)-1], Temperature: temp, Seed: uint64(i + 1),
				Format: specula.Format{JSONSchema: schema, Whitespace: ws},
			})
			if err != nil {
				return "", fmt.Errorf("%v, schema %d, prompt %d: %w", ws, si, i, err)
			}
			total++
			if c.Finish == spec.FinishStop && valid(c.Text, schema) == nil {
				lengths = append(lengths, len(c.Tokens))
			}
		}
	}
	row := fmt.Sprintf("| %v (%s) |", ws, map[grammar.Whitespace]string{grammar.WhitespaceFree: "before", grammar.WhitespaceIndent: "after, default", grammar.WhitespaceCompact: "after, compact"}[ws])
	for _, b := range budgets {
		within := 0
		for _, l := range lengths {
			if l <= b {
				within++
			}
		}
		row += fmt.Sprintf(" %d/%d (%.0f%%) |", within, total, 100*float64(within)/float64(total))
	}
	sum := 0
	for _, l := range lengths {
		sum += l
	}
	return row + fmt.Sprintf(" %.1f |", float64(sum)/float64(max(len(lengths), 1))), nil
}

// prompt asks for one record of a schema about a subject, in a Go source file.
func prompt(schema int, subject string) string {
	if schema == 0 {
		return fmt.Sprintf("// one %s record, as JSON:\n// {\"name\": \"bolt\", \"count\": 12, \"ok\": true}\nvar %sJSON = `", subject, subject)
	}
	return fmt.Sprintf("// The %s below is stored as JSON with id, title, tags and owner.\nconst %sJSON = `", subject, subject)
}

// valid parses text with encoding/json and checks it against the schema's
// keywords used here: type, properties, required, additionalProperties false,
// items, maxItems and maxLength.
func valid(text, schema string) error {
	var v, s any
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		return fmt.Errorf("parse: %w", err)
	}
	if err := json.Unmarshal([]byte(schema), &s); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	return check(v, s.(map[string]any))
}

func check(v any, s map[string]any) error {
	switch s["type"] {
	case "object":
		return checkObject(v, s)
	case "array":
		l, ok := v.([]any)
		if !ok || float64(len(l)) > num(s, "maxItems", 1e9) {
			return fmt.Errorf("%v: not an array within maxItems", v)
		}
		for _, e := range l {
			if err := check(e, s["items"].(map[string]any)); err != nil {
				return err
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok || float64(len([]rune(str))) > num(s, "maxLength", 1e9) {
			return fmt.Errorf("%v: not a string within maxLength", v)
		}
	case "integer":
		f, ok := v.(float64)
		if !ok || f != float64(int64(f)) {
			return fmt.Errorf("%v: not an integer", v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%v: not a boolean", v)
		}
	}
	return nil
}

func checkObject(v any, s map[string]any) error {
	o, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("%v: not an object", v)
	}
	props, _ := s["properties"].(map[string]any)
	req, _ := s["required"].([]any)
	for _, r := range req {
		if _, ok := o[r.(string)]; !ok {
			return fmt.Errorf("required %q missing", r)
		}
	}
	for k, x := range o {
		sub, ok := props[k].(map[string]any)
		if !ok {
			return errors.New("property " + k + " outside the schema")
		}
		if err := check(x, sub); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	return nil
}

func num(s map[string]any, k string, def float64) float64 {
	if f, ok := s[k].(float64); ok {
		return f
	}
	return def
}
