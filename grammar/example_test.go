package grammar_test

import (
	"fmt"
	"log"

	"github.com/specula/specula/grammar"
)

// A JSON Schema becomes a grammar; a matcher pairs it with a vocabulary and tells,
// state by state, which tokens may come next.
func ExampleParseJSONSchema() {
	g, err := grammar.ParseJSONSchema([]byte(`{"type": "object",
		"properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}}, "required": ["ok"]}`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(g.Matches(`{"ok": true, "n": 3}`), g.Matches(`{"n": 3}`))

	// A vocabulary of five tokens, the last the end of the text.
	vocab := grammar.NewVocab([]string{`{"ok": `, "true", "false", "}", ""}, []int32{4})
	m := grammar.NewMatcher(g, vocab)
	s := m.Start()
	for _, tok := range []int32{0, 2} { // {"ok": false
		s = m.Next(s, tok)
	}
	mask := m.Mask(s)
	fmt.Println(mask.Allowed(3), mask.Allowed(1), mask.Allowed(4)) // "}" yes, "true" no, the end not yet
	// Output:
	// true false
	// true false false
}

// GBNF as llama.cpp writes it; errors give the line and column.
func ExampleParseGBNF() {
	g, err := grammar.ParseGBNF(`root ::= greeting " " name
greeting ::= "hello" | "hi"
name ::= [A-Z] [a-z]*`)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(g.Matches("hi Ada"), g.Matches("hey Ada"))
	_, err = grammar.ParseGBNF("root ::= [a-")
	fmt.Println(err)
	// Output:
	// true false
	// grammar: syntax error: line 1, column 10: unterminated character class
}
