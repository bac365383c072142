package gpu

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// EnvLibPath names the environment variable that lists, separated by colons, the
// directories searched first for the CUDA libraries (libcuda, cuBLAS, NVRTC).
const EnvLibPath = "SPECULA_CUDA_LIB_PATH"

// libSpec names a shared library and the file names it goes by, most wanted first.
type libSpec struct {
	name  string   // for messages: "libcuda"
	files []string // "libcuda.so.1", …
	// system says that the library belongs to the driver: it is not searched for in
	// Python packages (whose copies would not match the kernel's driver).
	system bool
}

// The libraries the backend opens. Functions rather than variables: nothing at package
// level can be changed.
func specCUDA() libSpec {
	return libSpec{name: "libcuda", files: []string{"libcuda.so.1", "libcuda.so"}, system: true}
}

func specCUBLAS() libSpec {
	return libSpec{name: "libcublas", files: []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"}}
}

func specNVRTC() libSpec {
	return libSpec{name: "libnvrtc", files: []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"}}
}

// searchEnv is what library discovery reads from its surroundings. Tests fill it in
// by hand; [hostSearchEnv] reads the process's.
type searchEnv struct {
	getenv func(string) string
	// root is prepended to the fixed system directories ("" for "/"); tests point it
	// at a temporary tree. Directories named by environment variables are used as
	// they are.
	root string
	home string
}

// hostSearchEnv returns the search environment of this process.
func hostSearchEnv() searchEnv {
	home, _ := os.UserHomeDir()
	return searchEnv{getenv: os.Getenv, home: home}
}

// systemLibDirs are the usual homes of the driver and of a CUDA toolkit, searched after
// the directories the environment names.
func systemLibDirs() []string {
	return []string{
		"/usr/local/nvidia/lib64",
		"/usr/local/nvidia/lib",
		"/usr/lib/x86_64-linux-gnu",
		"/lib/x86_64-linux-gnu",
		"/usr/lib64",
		"/usr/lib",
		"/usr/lib/wsl/lib",
		"/usr/local/cuda/lib64",
		"/usr/local/cuda/targets/x86_64-linux/lib",
		"/usr/local/cuda-*/lib64",
		"/usr/local/cuda-*/targets/x86_64-linux/lib",
		"/opt/cuda/lib64",
	}
}

// pythonPrefixes are the places where Python installations keep lib/pythonX.Y: the
// system's, conda's, virtual environments under /opt (such as /opt/torch/.venv), and
// pyenv's. The NVIDIA wheels (nvidia-cublas, nvidia-cuda-nvrtc, …) unpack into
// site-packages/nvidia/<name>/lib (CUDA 12: nvidia/cublas/lib; CUDA 13: nvidia/cu13/lib).
func pythonPrefixes() []string {
	return []string{
		"/usr/local/lib",
		"/usr/lib",
		"/opt/conda/lib",
		"/opt/*/lib",
		"/opt/*/.venv/lib",
		"/opt/*/venv/lib",
		"/opt/venv/lib",
		"/root/.pyenv/versions/*/lib",
	}
}

// pythonNVIDIADirs returns the NVIDIA wheel library directories under one prefix
// (a directory holding pythonX.Y folders), as glob patterns.
func pythonNVIDIADirs(prefix string) []string {
	var out []string
	for _, pkgs := range []string{"site-packages", "dist-packages"} {
		out = append(out,
			filepath.Join(prefix, "python3*", pkgs, "nvidia", "*", "lib"),
			filepath.Join(prefix, "python3*", pkgs, "nvidia", "*", "lib64"))
	}
	return out
}

// searchDirs returns the directories searched for lib, in order, each once, and only
// those that exist:
//
//  1. the directories in $SPECULA_CUDA_LIB_PATH;
//  2. $CUDA_HOME/lib64 and $CUDA_PATH/lib64 (and …/lib);
//  3. the directories in $LD_LIBRARY_PATH;
//  4. for the toolkit libraries (not libcuda): the NVIDIA wheels of the active
//     virtual environment or conda environment ($VIRTUAL_ENV, $CONDA_PREFIX);
//  5. the usual system and toolkit directories;
//  6. for the toolkit libraries: the NVIDIA wheels of other Python installations
//     (system, /opt, conda, pyenv, ~/.local).
//
// Directories named "stubs" or "compat" are skipped: the stub libcuda.so there fails at
// cuInit, and a forward-compatibility libcuda may not match the kernel's driver.
func searchDirs(env searchEnv, lib libSpec) []string {
	var pats []string
	list := func(v string) {
		for _, d := range strings.Split(v, ":") {
			if d = strings.TrimSpace(d); d != "" {
				pats = append(pats, d)
			}
		}
	}
	list(env.getenv(EnvLibPath))
	for _, k := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if d := env.getenv(k); d != "" {
			pats = append(pats, filepath.Join(d, "lib64"), filepath.Join(d, "lib"))
		}
	}
	list(env.getenv("LD_LIBRARY_PATH"))
	rooted := func(p string) string { return filepath.Join(env.root, p) }
	if !lib.system {
		for _, k := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
			if d := env.getenv(k); d != "" {
				pats = append(pats, pythonNVIDIADirs(filepath.Join(d, "lib"))...)
				pats = append(pats, filepath.Join(d, "lib"))
			}
		}
	}
	for _, d := range systemLibDirs() {
		pats = append(pats, rooted(d))
	}
	if !lib.system {
		for _, p := range pythonPrefixes() {
			pats = append(pats, pythonNVIDIADirs(rooted(p))...)
		}
		if env.home != "" {
			pats = append(pats, pythonNVIDIADirs(filepath.Join(env.home, ".local", "lib"))...)
			for _, c := range []string{"miniconda3", "anaconda3", "miniforge3"} {
				pats = append(pats, pythonNVIDIADirs(filepath.Join(env.home, c, "lib"))...)
			}
		}
	}
	var out []string
	seen := map[string]bool{}
	for _, pat := range pats {
		matches := []string{pat}
		if strings.ContainsAny(pat, "*?[") {
			m, err := filepath.Glob(pat)
			if err != nil {
				continue
			}
			slices.Sort(m)
			slices.Reverse(m) // newer versions (python3.12 before 3.11, cu13 before cu12) first
			matches = m
		}
		for _, d := range matches {
			d = filepath.Clean(d)
			base := filepath.Base(d)
			if seen[d] || base == "stubs" || base == "compat" {
				continue
			}
			if st, err := os.Stat(d); err != nil || !st.IsDir() {
				continue
			}
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

// findLibrary returns the files in dirs that may be lib, in the order to try them:
// directory by directory, and within one directory by lib's file names, most wanted
// first.
func findLibrary(lib libSpec, dirs []string) []string {
	var out []string
	for _, d := range dirs {
		for _, f := range lib.files {
			p := filepath.Join(d, f)
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				out = append(out, p)
			}
		}
	}
	return out
}

// companions returns the libraries that must be loaded, from the same directory,
// before the library at path: cuBLAS needs cuBLASLt, NVRTC its builtins. Loading them
// first by full path lets the dynamic loader find them by name afterwards even where
// the directory is on no search path.
func companions(path string) []string {
	dir, base := filepath.Split(path)
	var pat string
	switch {
	case strings.HasPrefix(base, "libcublas.so"):
		pat = "libcublasLt.so" + strings.TrimPrefix(base, "libcublas.so")
	case strings.HasPrefix(base, "libnvrtc.so"):
		pat = "libnvrtc-builtins.so*"
	default:
		return nil
	}
	m, _ := filepath.Glob(filepath.Join(dir, pat))
	slices.Sort(m)
	slices.Reverse(m)
	return m
}
