package draft_test

import (
	"context"
	"fmt"
	"log"

	"github.com/specula/specula/draft"
)

// A deterministic drafter that guesses the sequence repeats its last token.
func ExampleFunc() {
	repeat := draft.Func(func(history, dst []int32) int {
		for i := range dst {
			dst[i] = history[len(history)-1]
		}
		return len(dst)
	})
	sess, err := repeat.Start(context.Background(), draft.Request{MaxK: 4})
	if err != nil {
		log.Fatal(err)
	}
	defer sess.Close()
	var p draft.Proposal
	if err := sess.Propose(context.Background(), []int32{5, 9}, 3, &p); err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.Tokens, p.Dists == nil)
	// Output: [9 9 9] true
}
