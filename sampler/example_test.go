package sampler_test

import (
	"fmt"
	"log"

	"github.com/specula/specula/sampler"
)

func ExampleSampler_Process() {
	s, err := sampler.New(sampler.Params{Temperature: 1, TopK: 3, TopP: 0.9}, 5)
	if err != nil {
		log.Fatal(err)
	}
	dist := make([]float32, 5)
	if err := s.Process([]float32{2, 1, 0.5, 0, -1}, nil, dist); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%.3f\n", dist)
	// Output: [0.629 0.231 0.140 0.000 0.000]
}

func ExampleSampler_Verify() {
	// A greedy check of a two-token draft: the target agrees with the first token
	// (its argmax after the context is 1) but not with the second.
	s, err := sampler.New(sampler.Params{}, 3)
	if err != nil {
		log.Fatal(err)
	}
	logits := [][]float32{
		{0, 5, 1}, // after the context: argmax 1
		{3, 0, 1}, // after token 1: argmax 0
		{0, 0, 9}, // after token 2 (not reached)
	}
	accepted, next, err := s.Verify(sampler.Step{Tokens: []int32{0, 1, 2}, K: 2, Logits: logits})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(accepted, next)
	// Output: 1 0
}
