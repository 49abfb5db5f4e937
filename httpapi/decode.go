package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// MaxBodyBytes bounds every request body: 1 MiB. A larger body is refused with 413.
const MaxBodyBytes = 1 << 20

// decodeJSON reads r's body into v strictly: Content-Type must be application/json; the body must be
// one JSON value of at most MaxBodyBytes, with no unknown fields and nothing after it. Every failure is
// a *Problem naming what was wrong, and the field where it can.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return problem(http.StatusUnsupportedMediaType, "unsupported_media_type", "send the body as application/json")
		}
	} else {
		return problem(http.StatusUnsupportedMediaType, "unsupported_media_type", "the Content-Type header is missing: send the body as application/json")
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return problem(http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("the body is larger than %d bytes", MaxBodyBytes))
		}
		return badRequest("invalid_json", "", "the body could not be read")
	}
	return decodeBytes(body, v)
}

// decodeBytes is decodeJSON's parser, separate so it can be fuzzed.
func decodeBytes(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("invalid_json", "", "the body is empty: send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonProblem(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("invalid_json", "", "the body has data after the JSON value")
	}
	return nil
}

func jsonProblem(err error) *Problem {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return badRequest("invalid_json", "", fmt.Sprintf("the body is not valid JSON (at byte %d)", se.Offset))
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return badRequest("invalid_json", "", fmt.Sprintf("the body must be a JSON object, not %s", te.Value))
		}
		return badRequest("invalid_field", field, fmt.Sprintf("field %q must be %s, not %s", field, jsonTypeName(te.Type.Kind().String()), te.Value))
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return badRequest("invalid_json", "", "the body ends before the JSON value does")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// encoding/json has no typed error for unknown fields; its message format is stable since Go 1.10.
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return badRequest("unknown_field", name, fmt.Sprintf("field %q is not part of this request", name))
	}
	return badRequest("invalid_json", "", "the body is not a valid request")
}

func jsonTypeName(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "slice", "array":
		return "an array"
	case "map", "struct", "ptr":
		return "an object"
	case "bool":
		return "a boolean"
	default:
		if strings.HasPrefix(kind, "int") || strings.HasPrefix(kind, "uint") || strings.HasPrefix(kind, "float") {
			return "a number"
		}
	}
	return "of another type"
}
