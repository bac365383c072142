package tokenizer_test

import (
	"fmt"
	"log"

	"github.com/specula/specula/tokenizer"
)

func ExampleTokenizer_Encode() {
	// A directory with tokenizer.json and tokenizer_config.json (gocoder's: byte-level
	// BPE trained on Go code).
	tok, err := tokenizer.Load("testdata/gocoder")
	if err != nil {
		log.Fatal(err)
	}
	ids := tok.Encode("func main() {", tok.DefaultOptions())
	fmt.Println(ids)
	var tokens []string
	for _, id := range ids {
		text, _ := tok.Token(id)
		tokens = append(tokens, text)
	}
	fmt.Printf("%q\n", tokens)
	fmt.Printf("%q\n", tok.Decode(ids))
	// Output:
	// [337 1807 297 266]
	// ["func" "Ġmain" "()" "Ġ{"]
	// "func main() {"
}

func ExampleEncodeOptions() {
	tok, err := tokenizer.Load("testdata/qwen2")
	if err != nil {
		log.Fatal(err)
	}
	text := "<|im_start|>user"
	// Trusted text, such as a chat template: special tokens are recognised.
	fmt.Println(tok.Encode(text, tokenizer.EncodeOptions{ParseSpecial: true}))
	// Untrusted text: the same characters are plain text.
	fmt.Println(tok.Encode(text, tokenizer.EncodeOptions{}))
	// Output:
	// [2272 117 712]
	// [60 124 646 95 1603 124 62 117 712]
}

func ExampleStream() {
	tok, err := tokenizer.Load("testdata/gocoder")
	if err != nil {
		log.Fatal(err)
	}
	// "é" and "🚀" are several byte-level tokens each; the stream holds their bytes
	// back until each character is whole.
	ids := tok.Encode("café 🚀!", tokenizer.EncodeOptions{})
	s := tok.NewStream(tokenizer.DecodeOptions{})
	var parts []string
	for _, id := range ids {
		parts = append(parts, s.Push(id))
	}
	parts = append(parts, s.Flush())
	fmt.Printf("%q\n", parts)
	// Output:
	// ["ca" "f" "" "é" " " "" "" "" "🚀" "!" ""]
}

func ExampleCompatible() {
	draft, err := tokenizer.Load("testdata/llama3")
	if err != nil {
		log.Fatal(err)
	}
	target, err := tokenizer.Load("testdata/qwen2")
	if err != nil {
		log.Fatal(err)
	}
	// The two fixtures share their byte-level vocabulary but not their special
	// tokens.
	err = tokenizer.Compatible(draft, target)
	fmt.Println(err != nil)
	r := tokenizer.Compare(draft, target)
	fmt.Println(r.Mismatches[0].ID, r.Mismatches[0].Draft, r.Mismatches[0].Target)
	// Output:
	// true
	// 2271 <|begin_of_text|> <|endoftext|>
}
