package specula_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/specula/specula"
)

// Open the demo pair shipped in models/ — gocoder-m drafted by prompt lookup and by
// gocoder-xs — and complete a prompt greedily.
func Example() {
	eng, err := specula.Open(specula.Config{
		Model: "models/gocoder-m-q8_0.gguf",
		Draft: "models/gocoder-xs-q8_0.gguf",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()
	c, err := eng.Complete(context.Background(), "func main() {\n\tfmt.", specula.Params{MaxTokens: 12, IgnoreEOS: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(c.Tokens), "tokens,", c.Finish, "- text:", c.Text != "")
	// Output: 12 tokens, length - text: true
}

// Stream text as the target accepts it, sampling with a seed, and stop at a string.
func ExampleEngine_Stream() {
	eng, err := specula.Open(specula.Config{Model: "models/gocoder-m-q8_0.gguf"}) // prompt lookup drafts
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()
	p := specula.Params{MaxTokens: 40, Temperature: 0.7, Seed: 7, Stop: []string{"\n\n"}}
	c, err := eng.Stream(context.Background(), "package main\n\nimport \"fmt\"\n", p, func(text string) error {
		return nil // write text to the client here
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.Finish, len(c.Tokens) > 0)
	// Output: stop true
}

// Score a text: how likely the target finds each of its tokens given those before.
func ExampleEngine_Score() {
	eng, err := specula.Open(specula.Config{Model: "models/gocoder-m-q8_0.gguf", Draft: "none"})
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()
	scores, err := eng.Score(context.Background(), specula.ScoreRequest{Prompt: "func main() {", TopLogprobs: 1})
	if err != nil {
		log.Fatal(err)
	}
	var sum float64
	var texts []string
	for _, s := range scores {
		texts = append(texts, fmt.Sprintf("%q", s.Text))
		sum += float64(s.Logprob)
	}
	fmt.Println(strings.Join(texts, " "))
	fmt.Println("log-likelihood below 0:", sum < 0)
	// Output:
	// " main" "()" " {"
	// log-likelihood below 0: true
}

// Generate two samples of a prompt with their log-probabilities, as events: the text
// of each choice as it becomes final, then its finish and statistics.
func ExampleEngine_Generate() {
	eng, err := specula.Open(specula.Config{Model: "models/gocoder-m-q8_0.gguf"})
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()
	req := specula.Request{
		Prompt:   "func main() {",
		Params:   specula.Params{MaxTokens: 8, Temperature: 0.8, Seed: 3, IgnoreEOS: true},
		N:        2,
		Logprobs: true,
	}
	tokens := make([]int, req.N)
	for ev, err := range eng.Generate(context.Background(), req) {
		if err != nil {
			log.Fatal(err)
		}
		tokens[ev.Choice] += len(ev.Logprobs) // one per token
		if ev.Finish != "" {
			fmt.Println("choice", ev.Choice, ev.Finish, tokens[ev.Choice], "tokens")
		}
	}
	// Output:
	// choice 0 length 8 tokens
	// choice 1 length 8 tokens
}

// A service maps the engine's errors to its answers with errors.Is and errors.As.
func ExampleParameterError() {
	eng, err := specula.Open(specula.Config{Model: "models/gocoder-m-q8_0.gguf", Draft: "none"})
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()
	_, err = eng.Complete(context.Background(), "func main() {", specula.Params{TopP: 2})
	if pe, ok := errors.AsType[*specula.ParameterError](err); ok {
		fmt.Println(errors.Is(err, specula.ErrInvalidParameter), pe.Field)
	}
	// Output: true TopP
}
