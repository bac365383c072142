package safetensors_test

import (
	"fmt"
	"log"

	"github.com/specula/specula/format/safetensors"
)

func ExampleOpenDir() {
	set, err := safetensors.OpenDir("path/to/Qwen2.5-0.5B")
	if err != nil {
		log.Fatal(err)
	}
	defer set.Close()
	for _, name := range set.Names() {
		t, _ := set.Tensor(name)
		if !t.Supported() {
			log.Fatalf("tensor %s has unsupported dtype %s", t.Name, t.TypeName)
		}
		fmt.Println(name, t.DType, t.Shape, len(t.Data))
	}
}
