package server

// errors.go: the error bodies and the mapping of the engine's errors to HTTP.
// [apiError] is every refusal the server writes, in OpenAI's format; request.go
// makes the ones that are the wire's, and engineError turns an error of the engine
// — its typed errors, and a *specula.ParameterError named by the request field it
// is about — into its status, param and code.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode"

	"github.com/specula/specula"
)

// apiError is an error answered in OpenAI's format:
//
//	{"error": {"message": "...", "type": "invalid_request_error", "param": "temperature", "code": "invalid_value"}}
//
// with an HTTP status, and for 429 and 503 a Retry-After header.
type apiError struct {
	Status     int    // HTTP status
	Message    string // for people
	Type       string // invalid_request_error, rate_limit_error, server_error, …
	Param      string // the request field at fault, if any
	Code       string // a machine-readable code, if any
	RetryAfter int    // seconds; sent as Retry-After when positive
}

func (e *apiError) Error() string { return e.Message }

// The error types of the wire format.
const (
	typeInvalidRequest = "invalid_request_error"
	typeRateLimit      = "rate_limit_error"
	typeServer         = "server_error"
)

// badParam is a 400 naming the request field at fault.
func badParam(param, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: param, Code: "invalid_value",
		Message: fmt.Sprintf(format, args...)}
}

// invalidType is a 400 for a field of the wrong JSON type.
func invalidType(param, format string, args ...any) *apiError {
	e := badParam(param, format, args...)
	e.Code = "invalid_type"
	return e
}

// invalidJSON is a 400 for a body that is not the JSON object of a request.
func invalidJSON(format string, args ...any) *apiError {
	e := badParam("", format, args...)
	e.Code = "invalid_json"
	return e
}

// unsupported is a 400 for a feature the server does not implement.
func unsupported(param, format string, args ...any) *apiError {
	e := badParam(param, format, args...)
	e.Code = "unsupported_parameter"
	return e
}

// errorBody is the JSON body of an error response, also sent as an SSE event when a
// stream fails after it began.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) body() errorBody {
	d := errorDetail{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		d.Param = &e.Param
	}
	if e.Code != "" {
		d.Code = &e.Code
	}
	return errorBody{Error: d}
}

// writeError answers a request with e.
func writeError(w http.ResponseWriter, e *apiError) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	w.WriteHeader(e.Status)
	b, _ := json.Marshal(e.body()) // cannot fail: strings and pointers to strings
	w.Write(append(b, '\n'))
}

// engineError turns an engine's error for the exchange x into the answer OpenAI's
// API gives: a parameter at fault 400, named as the request has it (the param, and
// the message's first word, before the library's own words: the bound a client sees
// is the library's, stated there alone), a prompt over the context
// 400 context_length_exceeded, a full queue 429 and an exhausted key/value cache or a
// closed engine 503 (with Retry-After), a shutdown 503, a client gone 499 (not
// written), anything else 500.
func engineError(ctx context.Context, x *exchange, err error) *apiError {
	pe, isParam := errors.AsType[*specula.ParameterError](err)
	oe, isOverload := errors.AsType[*specula.OverloadedError](err)
	switch {
	case errors.Is(context.Cause(ctx), errShutdown) || errors.Is(err, errShutdown):
		return shutdownError(errShutdown.Error() + ": the generation was cancelled")
	case errors.Is(err, specula.ErrNoChatTemplate):
		return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: "messages", Code: "chat_template_missing",
			Message: fmt.Sprintf("the model '%s' has no chat template (no %s in its GGUF file, no chat_template in its tokenizer_config.json), so it cannot answer chat requests: use /v1/completions, or give the server a chat template (-chat-template-file, or specula.Config.ChatTemplate) (%v)",
				x.modelName, specula.ChatTemplateKey, err)}
	case errors.Is(err, specula.ErrChatTemplate):
		return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: "messages", Code: "chat_template_error",
			Message: err.Error()}
	case errors.Is(err, specula.ErrPromptTooLong):
		return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: promptParam(x.chat), Code: "context_length_exceeded",
			Message: err.Error()}
	case errors.Is(err, specula.ErrTooLarge):
		return tooLarge(x, pe)
	case isParam:
		param := x.param(pe.Field)
		return badParam(param, "%s: %v", param, pe.Err)
	case isOverload:
		status, code := http.StatusTooManyRequests, "queue_full"
		if oe.TimedOut {
			status, code = http.StatusServiceUnavailable, "queue_timeout"
		}
		return &apiError{Status: status, Type: typeRateLimit, Code: code, Message: err.Error(),
			RetryAfter: min(max(int(oe.RetryAfter.Seconds()), 1), maxRetryAfterSec)}
	case errors.Is(err, specula.ErrOutOfMemory):
		return &apiError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "kv_cache_full",
			Message: "the server's key/value cache is full: retry later, or with a shorter prompt", RetryAfter: drainRetryAfter}
	case errors.Is(err, specula.ErrClosed):
		return &apiError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "model_closed", Message: err.Error(), RetryAfter: drainRetryAfter}
	case errors.Is(err, specula.ErrCancelled) || ctx.Err() != nil:
		return &apiError{Status: 499, Type: typeServer, Code: "cancelled", Message: "the client closed the request"}
	}
	return &apiError{Status: http.StatusInternalServerError, Type: typeServer, Message: "generation failed: " + err.Error()}
}

// tooLarge is the 400 of a request that could never fit the key/value cache (a
// *specula.CapacityError inside pe), in the request's own words: what to lower, by
// the fields it sent.
func tooLarge(x *exchange, pe *specula.ParameterError) *apiError {
	ce, _ := errors.AsType[*specula.CapacityError](pe)
	tokens := fmt.Sprintf("%s %d", x.maxTokensParam, ce.MaxTokens)
	if !ce.MaxTokensSet {
		tokens = fmt.Sprintf("%s unset (the rest of the context: %d tokens)", x.maxTokensParam, ce.MaxTokens)
	}
	var fixes []string
	if ce.FitMaxTokens > 0 {
		fixes = append(fixes, fmt.Sprintf("%s to at most %d", x.maxTokensParam, ce.FitMaxTokens))
	}
	if ce.FitChoices > 0 {
		fixes = append(fixes, fmt.Sprintf("n to at most %d", ce.FitChoices))
	}
	return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: x.param(pe.Field), Code: "kv_cache_exceeded",
		Message: fmt.Sprintf("n=%d choices of %s after a %d-token prompt may fill %d key/value positions, more than the server's whole key/value cache holds (%d): lower %s, or shorten the prompt",
			ce.Choices, tokens, ce.PromptTokens, ce.Positions, ce.CachePositions, strings.Join(fixes, " or "))}
}

// maxRetryAfterSec bounds the Retry-After of a refused request.
const maxRetryAfterSec = 60

// param names, as the request has it, the field of a specula.Request at fault: the
// request field a parameter's range, a format or a prompt came from.
func (x *exchange) param(field string) string {
	name, _, _ := strings.Cut(field, "[")
	name, _, _ = strings.Cut(name, ".")
	switch name {
	case "Prompt", "Tokens", "Messages":
		return promptParam(x.chat)
	case "Format":
		return x.formatParam
	case "MaxTokens":
		return x.maxTokensParam
	case "TopLogprobs":
		if x.chat {
			return "top_logprobs"
		}
		return "logprobs"
	}
	// Temperature → temperature, TopP → top_p, RepetitionPenalty → repetition_penalty.
	var b strings.Builder
	for i, r := range name {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

func promptParam(chat bool) string {
	if chat {
		return "messages"
	}
	return "prompt"
}

// shutdownError is the 503 of a request refused or cut short by a shutdown.
func shutdownError(msg string) *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "server_shutting_down",
		Message: msg, RetryAfter: drainRetryAfter}
}
