package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// valid accepts what parses and validates against each schema, and names what
// does not.
func TestValid(t *testing.T) {
	for _, c := range []struct {
		schema int
		text   string
		ok     bool
	}{
		{0, `{"name":"a","count":1,"ok":true}`, true},
		{0, "{\n\t\"name\": \"a\",\n\t\"count\": 1,\n\t\"ok\": false\n}", true},
		{0, `{"name":"a","count":1}`, false},
		{0, `{"name":"a","count":1.5,"ok":true}`, false},
		{0, `{"name":"a","count":1,"ok":true,"x":1}`, false},
		{0, `{"name":"abcdefghijabcdefghijk","count":1,"ok":true}`, false},
		{0, `{"name":"a","count":1,"ok":true`, false},
		{1, `{"id":1,"title":"t","tags":["a"],"owner":{"name":"n","admin":true}}`, true},
		{1, `{"id":1,"title":"t","tags":["a","b","c","d","e"],"owner":{"name":"n","admin":true}}`, false},
		{1, `{"id":1,"title":"t","tags":[],"owner":{"name":"n"}}`, false},
	} {
		err := valid(c.text, schemas[c.schema])
		assert.Equal(t, c.ok, err == nil, "%s: %v", c.text, err)
	}
}
