package target_test

import (
	"context"
	"fmt"
	"log"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/internal/markov"
	"github.com/specula/specula/target"
)

func ExampleSession_Verify() {
	ctx := context.Background()
	m, err := markov.New(markov.Config{Vocab: 8, Order: 1})
	if err != nil {
		log.Fatal(err)
	}
	tgt, err := target.NewLocal(m)
	if err != nil {
		log.Fatal(err)
	}
	s, err := tgt.Start(ctx, 4)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	prompt := []int32{1, 2, 3}
	if err := s.Prefill(ctx, prompt[:2]); err != nil { // the last token stays pending
		log.Fatal(err)
	}
	rows, err := s.Verify(ctx, prompt[2], []int32{5, 6, 7}, batch.Tree{}) // a chain
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(rows), "distributions from one pass")
	// Suppose the rule kept 5 and rejected 6: keep the path [0], drop 6 and 7.
	if err := s.Accept([]int32{0}); err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Len(), "tokens held")
	// Output:
	// 4 distributions from one pass
	// 4 tokens held
}

func ExampleSession_Verify_tree() {
	ctx := context.Background()
	m, err := markov.New(markov.Config{Vocab: 8, Order: 1})
	if err != nil {
		log.Fatal(err)
	}
	tgt, err := target.NewLocal(m)
	if err != nil {
		log.Fatal(err)
	}
	s, err := tgt.Start(ctx, 4)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	if err := s.Prefill(ctx, []int32{1, 2}); err != nil {
		log.Fatal(err)
	}
	// Two candidates after the pending token 3, 5 and 6, and 7 after 6.
	shape, err := batch.NewTree([]int32{-1, -1, 1})
	if err != nil {
		log.Fatal(err)
	}
	rows, err := s.Verify(ctx, 3, []int32{5, 6, 7}, shape)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(rows), "distributions from one pass")
	// Suppose the rule kept 6 and then 7: the sequence is 1 2 3 6 7.
	if err := s.Accept([]int32{1, 2}); err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Len(), "tokens held")
	// Output:
	// 4 distributions from one pass
	// 5 tokens held
}
