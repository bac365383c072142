package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/specula/specula/format/dtype"
)

// TestSplitRequantize reads an -also entry's optional @TYPE.
func TestSplitRequantize(t *testing.T) {
	for _, c := range []struct {
		in, path string
		typ      dtype.DType
		err      string
	}{
		{"/tmp/q15-awq", "/tmp/q15-awq", 0, ""},
		{"/tmp/q15-awq@Q6_K", "/tmp/q15-awq", dtype.Q6_K, ""},
		{"/tmp/q15-awq@Q8_0", "/tmp/q15-awq", dtype.Q8_0, ""},
		{"/tmp/q15-awq@Q9", "", 0, `/tmp/q15-awq@Q9: dtype: unknown type name "Q9"`},
	} {
		path, typ, err := splitRequantize(c.in)
		if c.err != "" {
			assert.EqualError(t, err, c.err)
			continue
		}
		assert.NoError(t, err)
		assert.Equal(t, c.path, path)
		assert.Equal(t, c.typ, typ)
	}
}
