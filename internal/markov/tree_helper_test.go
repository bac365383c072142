package markov_test

import "github.com/specula/specula/batch"

// mustTree is the tree of a parent list that a test knows to be valid.
func mustTree(parents []int32) batch.Tree {
	t, err := batch.NewTree(parents)
	if err != nil {
		panic(err)
	}
	return t
}
