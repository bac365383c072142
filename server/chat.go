package server

import (
	"encoding/json"
	"fmt"
	"strings"
)

// messageText flattens a message's content: a string, null, or a list of parts of
// which only {"type": "text", "text": ...} are supported.
func messageText(raw json.RawMessage, param string) (string, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string          `json:"type"`
		Text json.RawMessage `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badParam(param, "%s must be a string or an array of content parts", param)
	}
	var b strings.Builder
	for i, p := range parts {
		if p.Type != "text" {
			return "", unsupported(fmt.Sprintf("%s[%d].type", param, i), "content parts of type %q are not supported: this model reads text only", p.Type)
		}
		var t string
		if err := json.Unmarshal(p.Text, &t); err != nil {
			return "", badParam(fmt.Sprintf("%s[%d].text", param, i), "%s[%d].text must be a string", param, i)
		}
		b.WriteString(t)
	}
	return b.String(), nil
}
