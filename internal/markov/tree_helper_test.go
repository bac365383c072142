package markov_test

import "github.com/specula/specula/model"

// mustTree is the tree of a parent list that a test knows to be valid.
func mustTree(parents []int32) model.Tree {
	t, err := model.NewTree(parents)
	if err != nil {
		panic(err)
	}
	return t
}
