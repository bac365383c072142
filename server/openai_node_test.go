package server

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestOpenAINodeClient drives a live server with the official openai npm client
// (testdata/openai_client.mjs): completions and chat, whole and streamed, and errors
// surfacing as APIError with the server's status. It needs node and the package:
//
//	cd server/testdata && npm install
//
// and skips, saying so, without them.
func TestOpenAINodeClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: skipping the openai npm client test")
	}
	if _, err := os.Stat("testdata/node_modules/openai/package.json"); err != nil {
		t.Skip("the openai npm package is not installed: run `npm install` in server/testdata to run this test")
	}
	demoModels(t)
	cfg := speculativeConfig()
	cfg.Engine.Model = withChatTemplate(t, testTarget, t.TempDir(), chatmlTemplate(t))
	cfg.ModelName = "gocoder"
	cfg.APIKey = "test-key"
	srv, ts := startServer(t, cfg)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "openai_client.mjs", ts.URL+"/v1", "gocoder", cfg.APIKey)
	cmd.Dir = "testdata"
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("node openai_client.mjs: %v\n%s", err, stderr.String())
	}
	var got struct {
		Models     []string
		Completion struct {
			Text, Finish, Object, ID string
			Usage                    struct{ Prompt_tokens, Completion_tokens, Total_tokens int }
		}
		CompletionStream struct {
			Text, Finish string
			Chunks       int
		}
		Chat struct {
			Content, Role, Finish, Object string
			Usage                         struct{ Completion_tokens int }
		}
		ChatStream struct {
			Content, Role, Finish string
			Usage                 *struct{ Completion_tokens int }
		}
		ChatStreamHelper   struct{ Content, Finish string }
		CompletionLogprobs struct {
			Text          string
			Tokens        []string
			TokenLogprobs []float64
			Top           []int
		}
		Scored struct {
			Text             string
			Tokens           []string
			TokenLogprobs    []*float64
			Top              []map[string]float64
			CompletionTokens int
		}
		ChatLogprobs []struct {
			Token      string
			Logprob    float64
			Top, Bytes int
		}
		Choices struct {
			Texts            []string
			Indices          []int
			CompletionTokens int
		}
		JSONObject, JSONSchema struct{ Content, Finish string }
		GuidedChoice           struct{ Content, Finish string }
		StructuredRegex        struct{ Content, Finish string }
		Typo                   nodeError
		BadSchema              nodeError
		BadTemperature         nodeError
		UnknownModel           nodeError
		BadStream              nodeError
		TooManyLogprobs        nodeError
		TooManyChoices         nodeError
		ChoicesStreamed        struct {
			Whole, Streamed             []string
			WholeFinish, StreamedFinish []string
			WholeUsage, StreamedUsage   int
		}
		ChatChoicesStreamed struct {
			Whole, Helper []string
			HelperIndices []int
		}
		MessageTypo       nodeError
		PartTypo          nodeError
		SchemaTypo        nodeError
		StreamOptionsTypo nodeError
		WrongKey          nodeError
	}
	if err := json.Unmarshal(stdout, &got); err != nil {
		t.Fatalf("%v in %s", err, stdout)
	}
	t.Logf("openai client saw: %s", stdout)

	wantText := reference(t, srv, "func main() {", 24)
	rendered := "<|im_start|>system\nYou write Go.<|im_end|>\n<|im_start|>user\nWrite a function that reverses a string.<|im_end|>\n<|im_start|>assistant\n"
	wantChat := reference(t, srv, rendered, 24)
	if strings.Join(got.Models, ",") != "gocoder,gocoder-m-q8_0-chat,gocoder-m" {
		t.Errorf("models %v", got.Models)
	}
	c := got.Completion
	if c.Text != wantText || c.Finish == "" || c.Object != "text_completion" || !strings.HasPrefix(c.ID, "cmpl-") ||
		c.Usage.Total_tokens != c.Usage.Prompt_tokens+c.Usage.Completion_tokens {
		t.Errorf("completion %+v, want text %q", c, wantText)
	}
	if s := got.CompletionStream; s.Text != wantText || s.Finish != c.Finish || s.Chunks < 2 {
		t.Errorf("completion stream %+v", s)
	}
	if ch := got.Chat; ch.Content != wantChat || ch.Role != "assistant" || ch.Object != "chat.completion" || ch.Usage.Completion_tokens == 0 {
		t.Errorf("chat %+v, want %q", ch, wantChat)
	}
	if s := got.ChatStream; s.Content != wantChat || s.Role != "assistant" || s.Finish != got.Chat.Finish || s.Usage == nil || s.Usage.Completion_tokens != got.Chat.Usage.Completion_tokens {
		t.Errorf("chat stream %+v", s)
	}
	if h := got.ChatStreamHelper; h.Content != wantChat || h.Finish != got.Chat.Finish {
		t.Errorf("chat stream helper %+v", h)
	}
	short := reference(t, srv, "func main() {", 8)
	lp := got.CompletionLogprobs
	if lp.Text != short || strings.Join(lp.Tokens, "") != short || len(lp.TokenLogprobs) != len(lp.Tokens) || len(lp.Top) != len(lp.Tokens) {
		t.Errorf("completion logprobs %+v, want text %q", lp, short)
	}
	for i, v := range lp.TokenLogprobs {
		if v > 0 || lp.Top[i] < 1 || lp.Top[i] > 2 {
			t.Errorf("completion logprob %d: %v with %d alternatives", i, v, lp.Top[i])
		}
	}
	if sc := got.Scored; sc.Text != "func main() {" || sc.CompletionTokens != 0 || len(sc.Tokens) < 2 || len(sc.TokenLogprobs) != len(sc.Tokens) ||
		sc.TokenLogprobs[0] != nil || sc.Top[0] != nil || strings.Join(sc.Tokens, "") != sc.Text {
		t.Errorf("scored prompt %+v", sc)
	} else {
		for i := 1; i < len(sc.Tokens); i++ {
			if v := sc.TokenLogprobs[i]; v == nil || *v > 0 || len(sc.Top[i]) != 1 {
				t.Errorf("scored token %d: %v with %v", i, v, sc.Top[i])
			}
		}
	}
	if len(got.ChatLogprobs) != 8 {
		t.Errorf("chat logprobs %+v", got.ChatLogprobs)
	}
	for i, e := range got.ChatLogprobs {
		if e.Logprob > 0 || e.Top != 2 || e.Bytes == 0 {
			t.Errorf("chat logprob %d: %+v", i, e)
		}
	}
	if ch := got.Choices; len(ch.Texts) != 2 || ch.Texts[0] != short || ch.Texts[1] != short || ch.Indices[1] != 1 || ch.CompletionTokens != 16 {
		t.Errorf("n = 2: %+v, want %q twice", ch, short)
	}
	var obj map[string]any
	if jo := got.JSONObject; jo.Finish == "stop" && json.Unmarshal([]byte(jo.Content), &obj) != nil {
		t.Errorf("json_object: %+v", jo)
	}
	var rec struct {
		Name  string
		Lines *int
	}
	if js := got.JSONSchema; js.Finish == "stop" && (json.Unmarshal([]byte(js.Content), &rec) != nil || rec.Lines == nil || len(rec.Name) > 8) {
		t.Errorf("json_schema: %+v", js)
	}
	if got.JSONSchema.Finish != "stop" {
		t.Errorf("json_schema did not finish: %+v", got.JSONSchema)
	}
	if gc := got.GuidedChoice; gc.Finish != "stop" || (gc.Content != "yes" && gc.Content != "no") {
		t.Errorf("guided_choice: %+v", gc)
	}
	if sr := got.StructuredRegex; sr.Finish != "stop" || !regexp.MustCompile(`^[a-z]{3}$`).MatchString(sr.Content) {
		t.Errorf("structured_outputs regex: %+v", sr)
	}
	got.Typo.check(t, "temperture", 400, "BadRequestError", "temperture")
	got.BadSchema.check(t, "schema with multipleOf", 400, "BadRequestError", "response_format")
	got.TooManyLogprobs.check(t, "top_logprobs 21", 400, "BadRequestError", "top_logprobs")
	got.TooManyChoices.check(t, "n 65", 400, "BadRequestError", "n")
	cs := got.ChoicesStreamed
	if len(cs.Whole) != 3 || !slices.Equal(cs.Streamed, cs.Whole) || !slices.Equal(cs.StreamedFinish, cs.WholeFinish) || cs.StreamedUsage != cs.WholeUsage {
		t.Errorf("n = 3 streamed: %+v", cs)
	}
	if cs.Whole[0] == cs.Whole[1] && cs.Whole[1] == cs.Whole[2] {
		t.Errorf("three sampled choices are the same: %q", cs.Whole)
	}
	if ccs := got.ChatChoicesStreamed; len(ccs.Whole) != 2 || !slices.Equal(ccs.Helper, ccs.Whole) || !slices.Equal(ccs.HelperIndices, []int{0, 1}) {
		t.Errorf("chat n = 2 through the stream helper: %+v", ccs)
	}
	got.MessageTypo.check(t, "unknown field in a message", 400, "BadRequestError", "messages[0].bogus")
	got.PartTypo.check(t, "unknown field in a content part", 400, "BadRequestError", "messages[0].content[0].txt")
	got.SchemaTypo.check(t, "unknown field in json_schema", 400, "BadRequestError", "response_format.json_schema.strikt")
	got.StreamOptionsTypo.check(t, "unknown field in stream_options", 400, "BadRequestError", "stream_options.include_usge")
	if w := got.WrongKey; !w.Thrown || !w.APIError || w.Status != 401 || w.Name != "AuthenticationError" || w.Code == nil || *w.Code != "invalid_api_key" {
		t.Errorf("wrong key: %+v", w)
	}
	got.BadTemperature.check(t, "temperature -1", 400, "BadRequestError", "temperature")
	got.UnknownModel.check(t, "unknown model", 404, "NotFoundError", "model")
	got.BadStream.check(t, "streamed top_p 0", 400, "BadRequestError", "top_p")
}

// nodeError is what the script saw of a failed call.
type nodeError struct {
	Thrown, APIError bool
	Name             string
	Status           int
	Param, Code      *string
	Message          string
}

func (e nodeError) check(t *testing.T, what string, status int, name, param string) {
	t.Helper()
	if !e.Thrown || !e.APIError || e.Status != status || e.Name != name || e.Param == nil || *e.Param != param || e.Message == "" {
		t.Errorf("%s: %+v, want %s %d on %s", what, e, name, status, param)
	}
}
