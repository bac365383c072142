package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
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
	typeNotFound       = "not_found_error"
	typeRateLimit      = "rate_limit_error"
	typeServer         = "server_error"
)

// badParam is a 400 naming the request field at fault.
func badParam(param, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: param, Code: "invalid_value",
		Message: fmt.Sprintf(format, args...)}
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
