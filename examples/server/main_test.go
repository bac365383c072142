package main

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula"
)

func TestParseHelpers(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1048576": 1 << 20, "256MiB": 256 << 20, "1.5GiB": 3 << 29, "64M": 64 << 20, "100MB": 100e6, "512 KiB": 512 << 10} {
		got, err := parseBytes(in)
		assert.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "x", "-1", "5TB", "1e300"} {
		_, err := parseBytes(bad)
		assert.Error(t, err, bad)
	}
	k, adaptive, err := parseK("auto")
	assert.True(t, k == specula.DefaultMaxK && adaptive && err == nil)
	k, adaptive, err = parseK("3")
	assert.True(t, k == 3 && !adaptive && err == nil)
	for _, bad := range []string{"-1", "65", "x"} {
		_, _, err := parseK(bad)
		assert.Error(t, err, bad)
	}
}

// TestFlags: short flags stand for long ones, SPECULA_* variables set what the command
// line leaves alone (the command line wins), and the flags map onto the engine's and
// the server's configuration.
func TestFlags(t *testing.T) {
	env := map[string]string{
		"SPECULA_API_KEY":   "sekrit",
		"SPECULA_THREADS":   "3", // the command line's -t wins
		"SPECULA_CTX_SIZE":  "512",
		"SPECULA_PORT":      "9090",
		"SPECULA_DRAFT_MAX": "5",
	}
	f, err := parseFlags([]string{"-m", "a.gguf", "-md", "b.gguf", "-t", "2", "--host", "0.0.0.0", "--draft-min", "2"}, func(k string) string { return env[k] })
	require.NoError(t, err)
	assert.Equal(t, "0.0.0.0:9090", f.listenAddr())
	cfg, err := f.config()
	require.NoError(t, err)
	assert.Equal(t, specula.Config{Model: "a.gguf", Draft: "b.gguf", Threads: 2, ContextLength: 512, K: 5, MinK: 2,
		MaxSequences: 4 * runtime.GOMAXPROCS(0), Serving: specula.Serving{MaxRunning: 4 * runtime.GOMAXPROCS(0), MaxQueue: 64}}, cfg.Engine)
	assert.Equal(t, "sekrit", cfg.APIKey)

	f, err = parseFlags([]string{"-m", "a.gguf", "-md", "none", "-max-concurrent", "3"}, func(string) string { return "" })
	require.NoError(t, err)
	cfg, err = f.config()
	require.NoError(t, err)
	assert.Equal(t, 3, cfg.Engine.MaxSequences, "-kv-budget 0 sizes the cache for -max-concurrent requests")
	assert.Equal(t, 3, cfg.Engine.MaxRunning)

	f, err = parseFlags([]string{"-num-speculative-tokens", "0", "-m", "a.gguf"}, func(string) string { return "" })
	require.NoError(t, err)
	cfg, err = f.config()
	require.NoError(t, err)
	assert.Equal(t, "none", cfg.Engine.Draft)

	f, err = parseFlags([]string{"-m", "a.gguf", "-md", "none", "--max-queue", "0", "--saturation", "cores"}, func(string) string { return "" })
	require.NoError(t, err)
	cfg, err = f.config()
	require.NoError(t, err)
	assert.Equal(t, -1, cfg.Engine.MaxQueue, "no queue")
	assert.Equal(t, runtime.GOMAXPROCS(0), cfg.Engine.Saturation)

	_, err = parseFlags([]string{"-m", "a.gguf"}, func(k string) string { return map[string]string{"SPECULA_MAX_QUEUE": "many"}[k] })
	assert.ErrorContains(t, err, "SPECULA_MAX_QUEUE")
	_, err = parseFlags([]string{"stray"}, func(string) string { return "" })
	assert.Error(t, err)
	f, err = parseFlags([]string{"-m", "a.gguf", "--draft-min", "9"}, func(string) string { return "" })
	require.NoError(t, err)
	_, err = f.config()
	assert.ErrorContains(t, err, "-draft-min")
}
