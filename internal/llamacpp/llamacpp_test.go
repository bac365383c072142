package llamacpp

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNewUnavailable: without the library, New says so with ErrUnavailable, for the
// caller to skip.
func TestNewUnavailable(t *testing.T) {
	_, err := New(context.Background(), t.TempDir(), t.TempDir())
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrUnavailable), "%v", err)
}
