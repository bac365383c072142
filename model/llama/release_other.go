//go:build !linux

package llama

// release would tell the system that a copied tensor's mapped bytes are not needed.
func release(data []byte) {}
