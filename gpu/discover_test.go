package gpu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// touch creates the files (and their directories) below root.
func touch(t *testing.T, root string, files ...string) {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(root, f)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte("not a library"), 0o644))
	}
}

// fakeEnv is a search environment rooted at a temporary tree, with the given
// variables.
func fakeEnv(root, home string, vars map[string]string) searchEnv {
	return searchEnv{getenv: func(k string) string { return vars[k] }, root: root, home: home}
}

// rel strips root from each path, for readable comparisons.
func rel(root string, paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = strings.TrimPrefix(p, root)
	}
	return out
}

// TestSearchDirs checks the directories searched, and their order, on a fake tree:
// $SPECULA_CUDA_LIB_PATH first (several entries, empty and missing ones skipped), then
// $CUDA_HOME, $LD_LIBRARY_PATH, the active virtual environment's NVIDIA wheels, system
// directories (stubs and compat skipped), then other Python installations' wheels
// (site-packages and dist-packages, newer Python first) — and none of the Python
// directories for libcuda.
func TestSearchDirs(t *testing.T) {
	root := t.TempDir()
	touch(t, root,
		"custom/a/libcublas.so.12", "custom/b/libnvrtc.so.12",
		"cuda-home/lib64/libcublas.so.12",
		"ld/libnvrtc.so.12",
		"venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublas.so.13",
		"usr/lib/x86_64-linux-gnu/libcuda.so.1",
		"usr/local/cuda/lib64/stubs/libcuda.so",
		"usr/local/cuda/compat/libcuda.so.1",
		"usr/local/cuda-12.4/lib64/libcublas.so.12",
		"opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13",
		"opt/torch/.venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublas.so.12",
		"opt/torch/.venv/lib/python3.11/site-packages/nvidia/cublas/lib/libcublas.so.12",
		"usr/local/lib/python3.10/dist-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"opt/conda/lib/python3.12/site-packages/nvidia/cublas/lib64/libcublas.so.12",
		"home/.local/lib/python3.12/site-packages/nvidia/cublas/lib/libcublas.so.12",
	)
	require.NoError(t, os.MkdirAll(filepath.Join(root, "usr/local/cuda/compat"), 0o755))
	vars := map[string]string{
		EnvLibPath:        root + "/custom/b: :" + root + "/missing::" + root + "/custom/a",
		"CUDA_HOME":       root + "/cuda-home",
		"LD_LIBRARY_PATH": root + "/ld:" + root + "/custom/a",
		"VIRTUAL_ENV":     root + "/venv",
	}
	env := fakeEnv(root, root+"/home", vars)

	got := rel(root, searchDirs(env, specCUBLAS()))
	assert.Equal(t, []string{
		"/custom/b", "/custom/a", "/cuda-home/lib64", "/ld",
		"/venv/lib/python3.12/site-packages/nvidia/cu13/lib", "/venv/lib",
		"/usr/lib/x86_64-linux-gnu", "/usr/lib", "/usr/local/cuda/lib64", "/usr/local/cuda-12.4/lib64",
		"/usr/local/lib/python3.10/dist-packages/nvidia/cuda_nvrtc/lib",
		"/opt/conda/lib/python3.12/site-packages/nvidia/cublas/lib64",
		"/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cublas/lib",
		"/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib",
		"/opt/torch/.venv/lib/python3.11/site-packages/nvidia/cublas/lib",
		"/home/.local/lib/python3.12/site-packages/nvidia/cublas/lib",
	}, got)

	// libcuda belongs to the driver: no Python wheels, no stubs, no compat.
	got = rel(root, searchDirs(env, specCUDA()))
	assert.Equal(t, []string{
		"/custom/b", "/custom/a", "/cuda-home/lib64", "/ld",
		"/usr/lib/x86_64-linux-gnu", "/usr/lib", "/usr/local/cuda/lib64", "/usr/local/cuda-12.4/lib64",
	}, got)

	// findLibrary: directory by directory, the most wanted name first in each.
	touch(t, root, "custom/a/libcublas.so.13", "custom/a/libcublas.so")
	found := rel(root, findLibrary(specCUBLAS(), searchDirs(env, specCUBLAS())))
	assert.Equal(t, []string{
		"/custom/a/libcublas.so.13", "/custom/a/libcublas.so.12", "/custom/a/libcublas.so",
		"/cuda-home/lib64/libcublas.so.12",
		"/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublas.so.13",
		"/usr/local/cuda-12.4/lib64/libcublas.so.12",
		"/opt/conda/lib/python3.12/site-packages/nvidia/cublas/lib64/libcublas.so.12",
		"/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublas.so.12",
		"/opt/torch/.venv/lib/python3.11/site-packages/nvidia/cublas/lib/libcublas.so.12",
		"/home/.local/lib/python3.12/site-packages/nvidia/cublas/lib/libcublas.so.12",
	}, found)
	found = rel(root, findLibrary(specNVRTC(), searchDirs(env, specNVRTC())))
	assert.Equal(t, []string{
		"/custom/b/libnvrtc.so.12", "/ld/libnvrtc.so.12",
		"/usr/local/lib/python3.10/dist-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13",
	}, found)
	found = rel(root, findLibrary(specCUDA(), searchDirs(env, specCUDA())))
	assert.Equal(t, []string{"/usr/lib/x86_64-linux-gnu/libcuda.so.1"}, found)

	// With no variables set, only the fixed locations under root remain.
	bare := rel(root, searchDirs(fakeEnv(root, "", nil), specNVRTC()))
	assert.Equal(t, "/usr/lib/x86_64-linux-gnu", bare[0])
	assert.NotContains(t, bare, "/custom/b")
	assert.NotContains(t, bare, "/home/.local/lib/python3.12/site-packages/nvidia/cublas/lib")
}

// TestPythonNVIDIADirs checks the wheel layouts searched under one prefix, and that
// they match the CUDA 12 (nvidia/cublas/lib) and CUDA 13 (nvidia/cu13/lib) layouts.
func TestPythonNVIDIADirs(t *testing.T) {
	pats := pythonNVIDIADirs("/p/lib")
	assert.Equal(t, []string{
		"/p/lib/python3*/site-packages/nvidia/*/lib",
		"/p/lib/python3*/site-packages/nvidia/*/lib64",
		"/p/lib/python3*/dist-packages/nvidia/*/lib",
		"/p/lib/python3*/dist-packages/nvidia/*/lib64",
	}, pats)
	for _, c := range []struct {
		dir   string
		match bool
	}{
		{"/p/lib/python3.12/site-packages/nvidia/cu13/lib", true},
		{"/p/lib/python3.10/site-packages/nvidia/cublas/lib", true},
		{"/p/lib/python3.11/dist-packages/nvidia/cuda_nvrtc/lib", true},
		{"/p/lib/python2.7/site-packages/nvidia/cublas/lib", false},
		{"/p/lib/python3.12/site-packages/torch/lib", false},
		{"/p/lib/python3.12/site-packages/nvidia/cublas/include", false},
	} {
		any := false
		for _, p := range pats {
			ok, err := filepath.Match(p, c.dir)
			require.NoError(t, err)
			any = any || ok
		}
		assert.Equal(t, c.match, any, c.dir)
	}
}

// TestCompanions checks the libraries loaded before cuBLAS (cuBLASLt of the same
// version) and NVRTC (its builtins, newest first).
func TestCompanions(t *testing.T) {
	dir := t.TempDir()
	touch(t, dir, "libcublasLt.so.13", "libcublasLt.so.12", "libnvrtc-builtins.so.13.0", "libnvrtc-builtins.so.12.8")
	for _, c := range []struct {
		lib  string
		want []string
	}{
		{"libcublas.so.13", []string{"libcublasLt.so.13"}},
		{"libcublas.so.12", []string{"libcublasLt.so.12"}},
		{"libcublas.so.11", nil},
		{"libnvrtc.so.13", []string{"libnvrtc-builtins.so.13.0", "libnvrtc-builtins.so.12.8"}},
		{"libcuda.so.1", nil},
	} {
		got := companions(filepath.Join(dir, c.lib))
		var names []string
		for _, g := range got {
			names = append(names, filepath.Base(g))
		}
		assert.Equal(t, c.want, names, c.lib)
	}
}

// TestOpenLibraryErrors checks the messages of a library that is missing and of one
// that is found but does not load: they name the library, the directories searched,
// the files that failed, and the environment variable to set.
func TestOpenLibraryErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := openLibrary(libSpec{name: "libspecula-none", files: []string{"libspecula-none.so.1"}}, []string{dir})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "libspecula-none not found")
	assert.Contains(t, err.Error(), dir)
	assert.Contains(t, err.Error(), EnvLibPath)

	touch(t, dir, "libspecula-bad.so.1")
	_, err = openLibrary(libSpec{name: "libspecula-bad", files: []string{"libspecula-bad.so.1"}}, []string{dir})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "failed to load: "+filepath.Join(dir, "libspecula-bad.so.1"))

	// Through the environment variable, as OpenDevice and Available search.
	touch(t, dir, "libcuda.so.1")
	_, err = loadDriver(fakeEnv(t.TempDir(), "", map[string]string{EnvLibPath: dir}))
	if err != nil { // a real libcuda on the loader's path would load instead
		assert.Contains(t, err.Error(), filepath.Join(dir, "libcuda.so.1"))
	}
}

// TestAvailable checks that Available answers without panicking: nil on a machine
// with a GPU, else an error that says what is missing.
func TestAvailable(t *testing.T) {
	err := Available()
	if err == nil {
		t.Log("a GPU is available")
		return
	}
	t.Logf("Available: %v", err)
	msg := err.Error()
	assert.True(t, strings.HasPrefix(msg, "cuda: "), msg)
	assert.True(t, strings.Contains(msg, "libcuda") || strings.Contains(msg, "libcublas") ||
		strings.Contains(msg, "libnvrtc") || strings.Contains(msg, "CUDA"), msg)
	if strings.Contains(msg, "not found") {
		assert.Contains(t, msg, EnvLibPath)
	}
	_, err = OpenDevice(DeviceOptions{})
	assert.Error(t, err)
}

// TestKnownPeak checks the datasheet bandwidths by card name, and that the longer
// names win over their prefixes.
func TestKnownPeak(t *testing.T) {
	for _, c := range []struct {
		name string
		want float64
	}{
		{"NVIDIA H200", 4.8e12},
		{"NVIDIA H100 80GB HBM3", 3.35e12},
		{"NVIDIA H100 PCIe", 2.0e12},
		{"NVIDIA H100 NVL", 3.9e12},
		{"NVIDIA GH200 480GB", 4.0e12},
		{"NVIDIA A100-SXM4-80GB", 2.039e12},
		{"NVIDIA L4", 0.3e12},
		{"NVIDIA L40S", 0.864e12},
		{"Something Else", 0},
	} {
		assert.Equal(t, c.want, knownPeak(c.name), c.name)
	}
}
