package specula_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/specula/specula"
)

// A service in twenty lines: one endpoint that streams the target's continuation of the
// posted prompt. The README shows the same code, ending in http.ListenAndServe.
func Example_service() {
	eng, err := specula.Open(specula.Config{
		Model: "models/gocoder-m-q8_0.gguf",        // a GGUF file or a Hugging Face directory
		Draft: "model:models/gocoder-xs-q8_0.gguf", // prompt lookup goes in front of it
	})
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /complete", func(w http.ResponseWriter, r *http.Request) {
		prompt, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		req := specula.Request{Prompt: string(prompt), Params: specula.Params{MaxTokens: 64}}
		_, err := eng.GenerateFunc(r.Context(), req, func(ev specula.Event) error {
			if _, err := io.WriteString(w, ev.Text); err != nil {
				return err
			}
			return http.NewResponseController(w).Flush()
		})
		if err != nil {
			log.Print(err) // package server maps each error to its HTTP answer
		}
	})

	// A service serves mux: log.Fatal(http.ListenAndServe("localhost:8080", mux)).
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/complete", strings.NewReader("func main() {")))
	fmt.Println(rec.Code, rec.Body.Len() > 0)
	// Output: 200 true
}
