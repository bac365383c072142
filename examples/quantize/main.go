// Command quantize converts a model to a Q8_0 or Q4_0 GGUF file.
//
//	go run ./examples/quantize -in ../shared/models/gocoder-m -out gocoder-m-q8_0.gguf
//	go run ./examples/quantize -in model-f16.gguf -out model-q4_0.gguf -type Q4_0
//
// The input is a GGUF file with F32, F16 or BF16 weights, or a Hugging Face directory
// (config.json, safetensors, tokenizer.json) of a Llama or Qwen2 model.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/specula/specula/model/dtype"
	"github.com/specula/specula/model/quantize"
)

func main() {
	in := flag.String("in", "", "input GGUF file or Hugging Face directory")
	out := flag.String("out", "", "output GGUF file")
	typ := flag.String("type", "Q8_0", "weight type: Q8_0 or Q4_0")
	flag.Parse()
	if *in == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: quantize -in MODEL -out FILE.gguf [-type Q8_0|Q4_0]")
		os.Exit(2)
	}
	t, err := dtype.Parse(*typ)
	if err != nil {
		fmt.Fprintf(os.Stderr, "quantize: -type %q: use Q8_0 or Q4_0\n", *typ)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r, err := quantize.File(ctx, *in, *out, t)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%s: %d matrices to %s, %d tensors kept; %.1f MB → %.1f MB\n",
		*out, r.Quantized, t, r.Kept, float64(r.BytesIn)/1e6, float64(r.BytesOut)/1e6)
	for _, n := range r.Notes {
		fmt.Println("note:", n)
	}
}
