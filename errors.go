package specula

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/specula/specula/model"
	"github.com/specula/specula/sampler"
	"github.com/specula/specula/spec"
)

// The errors an engine returns, for a service to tell apart with [errors.Is] (and
// [errors.As] for the typed ones): each maps to one answer — a client's mistake, a
// prompt too long, a wait, a retry later.
var (
	// ErrInvalidParameter: a request or configuration asks for something
	// impossible. The error is a [*ParameterError] naming the field.
	ErrInvalidParameter = errors.New("specula: invalid parameter")
	// ErrPromptTooLong: the prompt leaves no room to generate, in the model's
	// context or in the whole key/value cache (OpenAI's context_length_exceeded).
	ErrPromptTooLong = errors.New("specula: the prompt is too long")
	// ErrTooLarge: the request could never run, even alone: its prompt and its
	// choices' tokens, at their most, fill more key/value memory than the whole
	// cache holds. The error is a [*CapacityError] (inside a [*ParameterError]
	// naming MaxTokens or N) saying how far to lower them.
	ErrTooLarge = errors.New("specula: the request is larger than the key/value cache")
	// ErrOverloaded: the engine's queue of waiting requests is full, or a request
	// waited longer than its limit. The error is an [*OverloadedError] with a
	// suggested wait.
	ErrOverloaded = errors.New("specula: overloaded")
	// ErrOutOfMemory: the key/value cache had no room for the request before it
	// produced a token (after that the text ends with [FinishMemory]). Admission
	// keeps it from happening on a model that reports its cache.
	ErrOutOfMemory = model.ErrOutOfMemory
	// ErrClosed: the engine is closed, or was closed while the request waited or ran.
	ErrClosed = errors.New("specula: the engine is closed")
	// ErrCancelled: the request's context ended. The error wraps the context's
	// error (context.Canceled or context.DeadlineExceeded) too.
	ErrCancelled = errors.New("specula: the request was cancelled")
	// ErrNoChatTemplate: a chat request, and the model has no usable chat
	// template — none in its GGUF file or tokenizer_config.json, or one that does
	// not compile ([Config.ChatTemplate] supplies one).
	ErrNoChatTemplate = errors.New("specula: the model has no usable chat template")
	// ErrChatTemplate: the chat template refused the conversation (its
	// raise_exception) or failed to render it. It is an invalid parameter too.
	ErrChatTemplate = errors.New("specula: the chat template rejected the conversation")
	// ErrEmptyPrompt: a prompt or conversation encodes to no tokens. It is an
	// invalid parameter too.
	ErrEmptyPrompt = errors.New("specula: the prompt encodes to no tokens")
)

// ParameterError is an invalid parameter of a request or a configuration: which field,
// and what is wrong with it. It matches [ErrInvalidParameter].
type ParameterError struct {
	// Field is the parameter's name as the Go field is written ("Temperature",
	// "Stop[2]", "Format.JSONSchema", "Messages[0].Role").
	Field string
	// Err says what is wrong.
	Err error
}

func (e *ParameterError) Error() string {
	return fmt.Sprintf("specula: %s: %v", e.Field, e.Err)
}

// Unwrap returns the cause and ErrInvalidParameter.
func (e *ParameterError) Unwrap() []error { return []error{ErrInvalidParameter, e.Err} }

// fromDecoder turns a refusal by the layers below into the engine's error: the
// sampler's *sampler.FieldError into a *ParameterError naming the sampling parameter
// (Params gives it the sampler's name), the decoder's *spec.RequestError into one
// naming the decoder's field, or into ErrPromptTooLong. It reads the errors' types,
// never their text; any other error comes back as it is.
func fromDecoder(err error) error {
	if fe, ok := errors.AsType[*sampler.FieldError](err); ok {
		return &ParameterError{Field: fe.Field, Err: fe.Err}
	}
	re, ok := errors.AsType[*spec.RequestError](err)
	switch {
	case !ok:
		return err
	case errors.Is(re.Kind, spec.ErrPromptTooLong):
		return fmt.Errorf("%w: %w", ErrPromptTooLong, err)
	}
	return &ParameterError{Field: re.Field, Err: re.Err}
}

// invalid returns a ParameterError for field with a formatted message.
func invalid(field, format string, args ...any) *ParameterError {
	return &ParameterError{Field: field, Err: fmt.Errorf(format, args...)}
}

// CapacityError is a request refused because, at its most — the prompt and every
// choice's MaxTokens tokens — it fills more key/value memory than the whole cache
// holds ([Config.KVBudget]): it could never run, and would only be cut short. The
// engine refuses it before it waits, rather than end its choices early. It matches
// [ErrTooLarge]; the engine returns it inside a [*ParameterError] whose Field is
// the parameter to lower: MaxTokens where lowering it alone is enough, else N.
type CapacityError struct {
	// PromptTokens, Choices and MaxTokens are the request's; MaxTokensSet is false
	// when the request left MaxTokens 0, which runs to the end of the context
	// (MaxTokens is then the tokens left there).
	PromptTokens, Choices, MaxTokens int
	MaxTokensSet                     bool
	// Positions are the key/value positions the request may fill, all choices
	// together (in whole blocks, forked choices sharing the prompt's), and
	// CachePositions those the whole cache holds.
	Positions, CachePositions int
	// FitMaxTokens is the largest MaxTokens that fits with Choices choices, and
	// FitChoices the most choices that fit with MaxTokens (0: none).
	FitMaxTokens, FitChoices int
}

func (e *CapacityError) Error() string {
	tokens := fmt.Sprintf("MaxTokens %d", e.MaxTokens)
	if !e.MaxTokensSet {
		tokens = fmt.Sprintf("MaxTokens unset (the rest of the context, %d tokens)", e.MaxTokens)
	}
	var fixes []string
	if e.FitMaxTokens > 0 {
		fixes = append(fixes, fmt.Sprintf("MaxTokens to at most %d", e.FitMaxTokens))
	}
	if e.FitChoices > 0 {
		fixes = append(fixes, fmt.Sprintf("N to at most %d", e.FitChoices))
	}
	lower := ""
	if len(fixes) > 0 {
		lower = "lower " + strings.Join(fixes, " or ") + ", "
	}
	return fmt.Sprintf("%d choices of %s after a %d-token prompt may fill %d key/value positions, and the whole cache holds %d: %sshorten the prompt, or raise KVBudget",
		e.Choices, tokens, e.PromptTokens, e.Positions, e.CachePositions, lower)
}

// Is makes a CapacityError match ErrTooLarge.
func (e *CapacityError) Is(target error) bool { return target == ErrTooLarge }

// OverloadedError is a request refused because the engine is full: its queue of
// waiting requests is full, or the request waited past the queue's time limit. It
// matches [ErrOverloaded].
type OverloadedError struct {
	// Running and Waiting are the requests running and waiting when it was refused.
	Running, Waiting int
	// RetryAfter estimates when a request would be admitted: the recent mean
	// request time, times the queue ahead, over the requests that run at once.
	RetryAfter time.Duration
	// TimedOut is set when the request waited past Config.QueueTimeout.
	TimedOut bool
}

func (e *OverloadedError) Error() string {
	if e.TimedOut {
		return fmt.Sprintf("specula: overloaded: the request waited past the queue's time limit (%d running, %d waiting)", e.Running, e.Waiting)
	}
	return fmt.Sprintf("specula: overloaded: %d requests are running and %d waiting, the most the engine queues; retry in about %v",
		e.Running, e.Waiting, e.RetryAfter.Round(time.Second))
}

// Is makes an OverloadedError match ErrOverloaded.
func (e *OverloadedError) Is(target error) bool { return target == ErrOverloaded }
