package markov_test

import (
	"context"
	"fmt"
	"log"

	"github.com/specula/specula/batch"
	"github.com/specula/specula/internal/markov"
)

func ExampleNew() {
	c, err := markov.New(markov.Config{Vocab: 4, Order: 1, Seed: 7})
	if err != nil {
		log.Fatal(err)
	}
	seq, err := c.NewSequence(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer seq.Close()
	// Forward three tokens at once and ask for the logits after the last two.
	logits := make([]float32, 2*4)
	b := batch.Batch{Tokens: []int32{0, 3, 1}, Outputs: []int32{1, 2}}
	if err := seq.Forward(context.Background(), b, logits); err != nil {
		log.Fatal(err)
	}
	fmt.Println(seq.Len(), c.Info().Arch)
	fmt.Println(logits[4:8][0] == c.Logits([]int32{1})[0])
	// Output:
	// 3 markov
	// true
}
