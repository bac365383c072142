package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/specula/specula/internal/llamacpp"
)

// defaultLcbench is where the native llama.cpp benchmark lives beside the checkout
// (../shared/peer/llamacpp/README.md).
const defaultLcbench = "../shared/peer/llamacpp/bin/lcbench"

// peerCommand runs one round of llama.cpp's measurements and returns its JSON: the
// native lcbench, or with -via node the node-llama-cpp script.
type peerCommand struct {
	via     string // "lcbench" or "node"
	lcbench string // the lcbench binary
	poll    int    // lcbench --poll: 50 (llama.cpp's default) spins, 0 yields
	script  string // llamacpp.mjs, for node
	peer    string // the folder holding node_modules/node-llama-cpp, for node
	node    string // the Node.js binary
}

// command is the command line of a round on model with c's settings.
func (p *peerCommand) command(ctx context.Context, model string, c *benchConfig, contexts string) (*exec.Cmd, error) {
	common := []string{"--model", abs(model), "--threads", strconv.Itoa(c.Threads),
		"--prompt-tokens", strconv.Itoa(c.PromptTokens), "--repeats", strconv.Itoa(c.Repeats),
		"--contexts", contexts, "--decode-tokens", strconv.Itoa(c.DecodeTokens),
		"--verify-context", strconv.Itoa(c.VerifyContext), "--verify-max", strconv.Itoa(c.VerifyMax),
		"--verify-repeats", strconv.Itoa(c.VerifyRepeats)}
	switch p.via {
	case "lcbench":
		bin, err := runnableLcbench(p.lcbench)
		if err != nil {
			return nil, err
		}
		args := append(common, "--poll", strconv.Itoa(p.poll), "--fa-compare", "none")
		return exec.CommandContext(ctx, bin, args...), nil
	case "node":
		cmd := exec.CommandContext(ctx, p.node, append([]string{abs(p.script)}, common...)...)
		cmd.Dir = p.peer
		return cmd, nil
	}
	return nil, fmt.Errorf("compare: -via %q: want lcbench or node", p.via)
}

// run runs one round and returns llama.cpp's JSON.
func (p *peerCommand) run(ctx context.Context, model string, c *benchConfig, contexts string) ([]byte, error) {
	cmd, err := p.command(ctx, model, c, contexts)
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("llama.cpp (%s): %w: %s", cmd.Path, err, stderr.String())
	}
	return bytes.TrimSpace(out), nil
}

// runnableLcbench returns a path lcbench runs from: its own, or a copy of its folder
// staged once in the system's temporary directory where a copy of the shared data
// lost the folder's library links (see llamacpp.Runnable).
func runnableLcbench(bin string) (string, error) {
	dir, err := llamacpp.Runnable(filepath.Dir(bin), filepath.Join(os.TempDir(), "specula-lcbench"))
	if err != nil {
		return "", fmt.Errorf("lcbench: %w (see ../shared/peer/llamacpp/README.md)", err)
	}
	return filepath.Join(dir, filepath.Base(bin)), nil
}

// abs is p made absolute where it can be.
func abs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

// loadAverage is the system's load over the last 1, 5 and 15 minutes, as uptime
// prints it ("" where the system does not say).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
