package sampler_test

import (
	"fmt"
	"log"

	"github.com/specula/specula/batch"
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
	// A greedy check of a two-token chain draft: the target agrees with the first
	// token (its argmax after the context is 1) but not with the second.
	s, err := sampler.New(sampler.Params{}, 3)
	if err != nil {
		log.Fatal(err)
	}
	var d sampler.Draft
	if err := d.Set(3, []int32{1, 2}, nil, batch.Tree{}); err != nil { // the zero Tree: a chain
		log.Fatal(err)
	}
	logits := [][]float32{
		{0, 5, 1}, // after the context: argmax 1
		{3, 0, 1}, // after token 1: argmax 0
		{0, 0, 9}, // after token 2 (not reached)
	}
	path, next, err := s.Verify(sampler.Step{History: []int32{0}, Draft: d, Logits: logits}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(path, next)
	// Output: [0] 0
}

func ExampleSampler_Verify_tree() {
	// The same check of a tree: two candidates for the first token, 2 and 1, and
	// below 1 the candidate 0. The target's argmax is 1, then 0, then 2.
	s, err := sampler.New(sampler.Params{}, 3)
	if err != nil {
		log.Fatal(err)
	}
	tree, err := batch.NewTree([]int32{-1, -1, 1})
	if err != nil {
		log.Fatal(err)
	}
	var d sampler.Draft
	if err := d.Set(3, []int32{2, 1, 0}, nil, tree); err != nil {
		log.Fatal(err)
	}
	logits := [][]float32{
		{0, 5, 1}, // after the context: argmax 1
		{0, 0, 0}, // after node 0 (token 2, rejected)
		{3, 0, 1}, // after node 1 (token 1): argmax 0
		{0, 0, 9}, // after node 2 (token 0): argmax 2
	}
	path, next, err := s.Verify(sampler.Step{History: []int32{0}, Draft: d, Logits: logits}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(path, next)
	// Output: [1 2] 2
}
