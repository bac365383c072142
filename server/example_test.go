package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/specula/specula"
)

// A server for the demo pair, answering one completion. On the command line the same
// is
//
//	go run ./examples/server -addr localhost:8080
//	curl -s localhost:8080/v1/completions -d '{"prompt": "func main() {", "max_tokens": 8}'
func ExampleNew() {
	eng, err := specula.Open(specula.Config{
		Model: "../models/gocoder-m-q8_0.gguf",
		Draft: "../models/gocoder-xs-q8_0.gguf", // with prompt lookup in front
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()
	srv, err := New(eng, Config{Pacing: 20e6}) // 20 ms
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	defer srv.Shutdown(context.Background())

	resp, err := http.Post(ts.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt": "func main() {", "max_tokens": 8, "temperature": 0, "ignore_eos": true}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	var c struct {
		Object  string
		Choices []struct{ Text, Finish_reason string }
		Usage   struct{ Completion_tokens int }
	}
	json.NewDecoder(resp.Body).Decode(&c)
	fmt.Println(resp.StatusCode, c.Object, c.Choices[0].Finish_reason, c.Usage.Completion_tokens)
	// Output: 200 text_completion length 8
}
