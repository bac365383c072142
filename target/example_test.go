package target_test

import (
	"context"
	"fmt"
	"log"

	"github.com/specula/specula/model/markov"
	"github.com/specula/specula/target"
)

func ExampleTarget_Verify() {
	ctx := context.Background()
	m, err := markov.New(markov.Config{Vocab: 8, Order: 1})
	if err != nil {
		log.Fatal(err)
	}
	seq, err := m.NewSequence(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer seq.Close()
	t, err := target.New(seq, 8, 4)
	if err != nil {
		log.Fatal(err)
	}
	prompt := []int32{1, 2, 3}
	if err := t.Prefill(ctx, prompt[:2]); err != nil { // the last token stays pending
		log.Fatal(err)
	}
	rows, err := t.Verify(ctx, prompt[2], []int32{5, 6, 7})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(rows), "distributions from one pass")
	// Suppose the rule kept 5 and rejected 6: drop 6 and 7.
	if err := t.Accept(1); err != nil {
		log.Fatal(err)
	}
	fmt.Println(t.Len(), "tokens held")
	// Output:
	// 4 distributions from one pass
	// 4 tokens held
}
