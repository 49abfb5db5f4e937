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
	body, err := readJSONBody(w, r)
	if err != nil {
		return err
	}
	return decodeBytes(body, v)
}

// readJSONBody is decodeJSON's reading half: the Content-Type check and the body, bounded by MaxBodyBytes.
// A body that fits in 256 bytes (a heartbeat's) is read into one buffer of its Content-Length (or of
// 256 bytes), not io.ReadAll's growing one. That first read, at most 256 bytes, needs no bound; only a
// body that goes on past it is read through a MaxBytesReader, for what MaxBodyBytes leaves — so a body
// declared small (a heartbeat's) costs no MaxBytesReader, and one that goes on past its declared length
// (no net/http request does) is bounded all the same.
func readJSONBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if ct != "application/json" { // the common case, without parsing
			mt, _, err := mime.ParseMediaType(ct)
			if err != nil || mt != "application/json" {
				return nil, problem(http.StatusUnsupportedMediaType, "unsupported_media_type", "send the body as application/json")
			}
		}
	} else {
		return nil, problem(http.StatusUnsupportedMediaType, "unsupported_media_type", "the Content-Type header is missing: send the body as application/json")
	}
	size := 256
	if r.ContentLength >= 0 && r.ContentLength < 256 {
		size = int(r.ContentLength) + 1 // one more, so that the end of the body is seen
	}
	small := make([]byte, size)
	n, err := io.ReadFull(r.Body, small)
	var body []byte
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return small[:n], nil
	case err == nil:
		var rest []byte
		rest, err = io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes-int64(n)))
		body = append(small, rest...)
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, problem(http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("the body is larger than %d bytes", MaxBodyBytes))
		}
		return nil, badRequest("invalid_json", "", "the body could not be read")
	}
	return body, nil
}

// canonicalServerID returns the value of a body that is exactly {"server_id":"<value>"} — JSON
// whitespace allowed between tokens, the key spelled as is, the value printable ASCII without escapes —
// and whether the body has that form. decodeBytes would read such a body into a ServerIDBody with
// that value (FuzzServerIDBody checks it); any other body, valid or not, is left to decodeBytes, which
// also names what is wrong with it. It is the heartbeat's path: it allocates nothing.
func canonicalServerID(b []byte) ([]byte, bool) {
	i := skipJSONSpace(b, 0)
	const key = `"server_id"`
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	i = skipJSONSpace(b, i+1)
	if !bytes.HasPrefix(b[i:], []byte(key)) {
		return nil, false
	}
	i = skipJSONSpace(b, i+len(key))
	if i >= len(b) || b[i] != ':' {
		return nil, false
	}
	i = skipJSONSpace(b, i+1)
	if i >= len(b) || b[i] != '"' {
		return nil, false
	}
	start := i + 1
	for i = start; i < len(b) && b[i] != '"'; i++ {
		if b[i] < 0x20 || b[i] > 0x7e || b[i] == '\\' {
			return nil, false
		}
	}
	if i >= len(b) {
		return nil, false
	}
	v := b[start:i]
	i = skipJSONSpace(b, i+1)
	if i >= len(b) || b[i] != '}' {
		return nil, false
	}
	if skipJSONSpace(b, i+1) != len(b) {
		return nil, false
	}
	return v, true
}

func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
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
