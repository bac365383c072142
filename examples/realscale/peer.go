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

// runnableLcbench returns a path lcbench runs from. Its folder holds the libraries
// as symbolic links (libggml.so.0 → libggml.so.0.9.4); a copy that lost them — the
// links turned into small files naming their targets — cannot load, so the folder
// is staged once in the system's temporary directory with the links made again.
func runnableLcbench(bin string) (string, error) {
	dir := filepath.Dir(bin)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("lcbench: %w (see ../shared/peer/llamacpp/README.md)", err)
	}
	broken := map[string]string{} // link name → target
	for _, e := range entries {
		if target, ok := lostLink(dir, e); ok {
			broken[e.Name()] = target
		}
	}
	if len(broken) == 0 {
		return bin, nil
	}
	stage := filepath.Join(os.TempDir(), "specula-lcbench")
	if err := stageFolder(dir, stage, entries, broken); err != nil {
		return "", fmt.Errorf("lcbench: staging %s with its library links: %w", dir, err)
	}
	return filepath.Join(stage, filepath.Base(bin)), nil
}

// lostLink reports whether e is a small regular file whose whole content names
// another file of dir: a symbolic link that a copy turned into a file.
func lostLink(dir string, e os.DirEntry) (string, bool) {
	info, err := e.Info()
	if err != nil || !info.Mode().IsRegular() || info.Size() == 0 || info.Size() > 255 {
		return "", false
	}
	b, err := os.ReadFile(filepath.Join(dir, e.Name()))
	if err != nil {
		return "", false
	}
	target := strings.TrimSpace(string(b))
	if target == "" || strings.ContainsAny(target, "/\n\x00") || target == e.Name() {
		return "", false
	}
	if _, err := os.Stat(filepath.Join(dir, target)); err != nil {
		return "", false
	}
	return target, true
}

// stageFolder copies dir's files into stage, making the broken links links again.
func stageFolder(dir, stage string, entries []os.DirEntry, broken map[string]string) error {
	if err := os.RemoveAll(stage); err != nil {
		return err
	}
	if err := os.MkdirAll(stage, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		dst := filepath.Join(stage, e.Name())
		if target, ok := broken[e.Name()]; ok {
			if err := os.Symlink(target, dst); err != nil {
				return err
			}
			continue
		}
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			return err
		}
	}
	return nil
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
