package main

import (
	"bytes"
	"flag"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/specula/specula"
	"github.com/specula/specula/spec"
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

	f, err = parseFlags([]string{"-m", "a.gguf", "-md", "none", "--max-queue", "-1", "--saturation", "cores", "-queue-timeout", "2s"}, func(string) string { return "" })
	require.NoError(t, err)
	cfg, err = f.config()
	require.NoError(t, err)
	assert.Equal(t, -1, cfg.Engine.MaxQueue, "no queue")
	assert.Equal(t, 2*time.Second, cfg.Engine.QueueTimeout)
	assert.Equal(t, runtime.GOMAXPROCS(0), cfg.Engine.Saturation)

	// The flags are the library's fields, under their names and meanings; the old
	// name -max-concurrent (and its variable) still works, the new one winning.
	for _, c := range []struct {
		name    string
		args    []string
		env     map[string]string
		running int
		queue   int
	}{
		{"-max-running", []string{"-max-running", "3"}, nil, 3, 64},
		{"-max-concurrent, the old name", []string{"-max-concurrent", "5"}, nil, 5, 64},
		{"SPECULA_MAX_RUNNING", nil, map[string]string{"SPECULA_MAX_RUNNING": "6"}, 6, 64},
		{"SPECULA_MAX_CONCURRENT", nil, map[string]string{"SPECULA_MAX_CONCURRENT": "7"}, 7, 64},
		{"the new variable wins", nil, map[string]string{"SPECULA_MAX_CONCURRENT": "7", "SPECULA_MAX_RUNNING": "2"}, 2, 64},
		{"the command line wins", []string{"-max-concurrent", "5"}, map[string]string{"SPECULA_MAX_RUNNING": "2"}, 5, 64},
		{"-max-queue 0 is the library's default", []string{"-max-queue", "0"}, nil, 4 * runtime.GOMAXPROCS(0), 0},
	} {
		f, err := parseFlags(append([]string{"-m", "a.gguf", "-md", "none"}, c.args...), func(k string) string { return c.env[k] })
		require.NoError(t, err, c.name)
		cfg, err := f.config()
		require.NoError(t, err, c.name)
		assert.Equal(t, c.running, cfg.Engine.MaxRunning, c.name)
		assert.Equal(t, c.running, cfg.Engine.MaxSequences, c.name)
		assert.Equal(t, c.queue, cfg.Engine.MaxQueue, c.name)
	}

	_, err = parseFlags([]string{"-m", "a.gguf"}, func(k string) string { return map[string]string{"SPECULA_MAX_QUEUE": "many"}[k] })
	assert.ErrorContains(t, err, "SPECULA_MAX_QUEUE")
	_, err = parseFlags([]string{"stray"}, func(string) string { return "" })
	assert.Error(t, err)
	f, err = parseFlags([]string{"-m", "a.gguf", "--draft-min", "9"}, func(string) string { return "" })
	require.NoError(t, err)
	_, err = f.config()
	assert.ErrorContains(t, err, "-draft-min")
}

// -draft-p-min sets Config.DraftPMin: off (the default) is 0, auto learns
// (spec.PMinLearned), a number fixes it; anything else is refused, naming the flag.
func TestDraftPMinFlag(t *testing.T) {
	cases := []struct {
		arg, env string
		want     float64
		bad      bool
	}{{"", "", 0, false}, {"auto", "", spec.PMinLearned, false}, {"off", "", 0, false}, {"0.75", "", 0.75, false}, {"", "0.6", 0.6, false},
		{"0", "", 0, true}, {"1.5", "", 0, true}, {"high", "", 0, true}}
	for _, c := range cases {
		args := []string{"-m", "a.gguf", "-md", "b.gguf"}
		if c.arg != "" {
			args = append(args, "--draft-p-min", c.arg)
		}
		f, err := parseFlags(args, func(k string) string { return map[string]string{"SPECULA_DRAFT_P_MIN": c.env}[k] })
		require.NoError(t, err, c.arg)
		cfg, err := f.config()
		if c.bad {
			assert.ErrorContains(t, err, "-draft-p-min", c.arg)
			continue
		}
		require.NoError(t, err, c.arg)
		assert.Equal(t, c.want, cfg.Engine.DraftPMin, "%q %q", c.arg, c.env)
	}
}

// -h prints the flags under their library names, the old name beside the new, and
// the defaults of a request that no flag sets.
func TestHelp(t *testing.T) {
	var out bytes.Buffer
	_, err := parseFlagsTo([]string{"-h"}, func(string) string { return "" }, &out)
	require.ErrorIs(t, err, flag.ErrHelp)
	for _, want := range []string{"-max-running", "the old name of -max-running", "-max-queue", "library's default, 1024",
		"-queue-timeout", "503 queue_timeout", "max_tokens 16 for /v1/completions", "context for /v1/chat/completions"} {
		assert.Contains(t, out.String(), want)
	}
}
