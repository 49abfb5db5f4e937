// Package apicheck holds the API to its OpenAPI document (httpapi.OpenAPI): an http.Handler wrapper
// that validates every request and every answer passing through it with kin-openapi (OpenAPI 3.1,
// JSON Schema 2020-12), and a check that the routes a gin engine serves and the document's operations
// are the same set. The service test harnesses put it in front of the running service, so every answer
// the API test suites provoke is checked.
//
// What is a finding (each is passed to Options.Report; the answer itself goes through unchanged):
//   - a request for a path and method the document does not describe, unless the service answered it
//     404 no_route or 405 method_not_allowed (tests of unknown routes);
//   - an answer that does not match the document: an undocumented status, content type or header, or a
//     body that does not validate against its schema (a problem whose type is not listed is one);
//   - a request the document refuses that the service did not refuse with a 4xx (or 5xx) answer;
//   - an answer to a key whose role (Options.KeyRole) the operation's x-mcpfleet-roles leaves out that
//     is not a refusal, or a 403 forbidden to a key whose role it lists;
//   - for an event stream (text/event-stream with x-mcpfleet-event-data), a frame whose data does not
//     validate against the schema of its event type.
//
// Paths outside the API are passed through unchecked: the dashboard (/ui, /ui/...) and the chaos hook
// of chaos builds (/chaos/...). Bodies larger than MaxBody are passed through with their status and
// headers checked only.
package apicheck

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/gin-gonic/gin"

	"github.com/mcpfleet/mcpfleet/httpapi"
)

// MaxBody is the most of a request or answer body the checker keeps to validate.
const MaxBody = 4 << 20

// Options configure a checking handler.
type Options struct {
	// Report receives every finding; it is called from the serving goroutines, concurrently. Required.
	Report func(error)
	// KeyRole returns the role (module, operator, admin) of a bearer key the caller knows; ok false
	// for a key it does not know, whose answers are then not checked for roles. Optional.
	KeyRole func(apiKey string) (role string, ok bool)
}

// Document is the parsed and validated OpenAPI document with its router.
type Document struct {
	T      *openapi3.T
	router routers.Router
}

var (
	loadOnce sync.Once
	loaded   *Document
	loadErr  error
)

// Load parses httpapi.OpenAPI() once and validates it as an OpenAPI 3.1 document; the same
// *Document is returned to every caller (it is read only).
func Load() (*Document, error) {
	loadOnce.Do(func() { loaded, loadErr = Parse(httpapi.OpenAPI()) })
	return loaded, loadErr
}

// Parse parses and validates an OpenAPI 3.1 document (tests use it for altered copies).
func Parse(doc []byte) (*Document, error) {
	t, err := openapi3.NewLoader().LoadFromData(doc)
	if err != nil {
		return nil, fmt.Errorf("parse the OpenAPI document: %w", err)
	}
	if !t.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("the OpenAPI document is version %s, not 3.1", t.OpenAPI)
	}
	if err := t.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("the OpenAPI document is not valid: %w", err)
	}
	r, err := gorillamux.NewRouter(t)
	if err != nil {
		return nil, fmt.Errorf("route the OpenAPI document: %w", err)
	}
	return &Document{T: t, router: r}, nil
}

// outside reports whether path is not part of the API the document describes.
func outside(path string) bool {
	return path == "/ui" || strings.HasPrefix(path, "/ui/") || strings.HasPrefix(path, "/chaos/")
}

// CheckRoutes compares the routes of engine with the document's operations: every route must be
// described (a route registered for every method, as gin's Any does, needs its path only) and every
// operation served. It returns one error naming all differences, or nil.
func (d *Document) CheckRoutes(routes gin.RoutesInfo) error {
	served := map[string]map[string]bool{} // path → methods
	for _, r := range routes {
		if outside(r.Path) {
			continue
		}
		p := ginPath(r.Path)
		if served[p] == nil {
			served[p] = map[string]bool{}
		}
		served[p][r.Method] = true
	}
	var problems []string
	for p, methods := range served {
		item := d.T.Paths.Find(p)
		if item == nil {
			problems = append(problems, "route "+p+" is not in the document")
			continue
		}
		if len(methods) >= 9 { // gin's Any: the handler itself answers each method
			continue
		}
		for m := range methods {
			if item.GetOperation(m) == nil {
				problems = append(problems, "route "+m+" "+p+" is not in the document")
			}
		}
	}
	for p, item := range d.T.Paths.Map() {
		for m := range item.Operations() {
			if !served[p][m] && len(served[p]) < 9 {
				problems = append(problems, "operation "+m+" "+p+" is not served")
			}
		}
	}
	if len(problems) == 0 {
		return nil
	}
	slices.Sort(problems)
	return errors.New(strings.Join(problems, "; "))
}

// ginPath turns /a/:id/b into /a/{id}/b.
func ginPath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		if strings.HasPrefix(s, ":") || strings.HasPrefix(s, "*") {
			parts[i] = "{" + s[1:] + "}"
		}
	}
	return strings.Join(parts, "/")
}

// Handler returns next behind the checker. If next is a gin engine (or has its Routes method), its
// routes are compared with the document at once (CheckRoutes), a difference reported.
func (d *Document) Handler(next http.Handler, opt Options) http.Handler {
	if rs, ok := next.(interface{ Routes() gin.RoutesInfo }); ok {
		if err := d.CheckRoutes(rs.Routes()); err != nil {
			opt.Report(fmt.Errorf("apicheck: the routes and the document differ: %w", err))
		}
	}
	return &checker{d: d, next: next, opt: opt}
}

type checker struct {
	d    *Document
	next http.Handler
	opt  Options
}

func (c *checker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if outside(r.URL.Path) {
		c.next.ServeHTTP(w, r)
		return
	}
	var reqBody []byte
	bodyKept := true
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
		if err != nil {
			bodyKept = false
		}
		reqBody = b
		if len(b) > MaxBody {
			bodyKept = false
		}
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
	}
	rec := &recorder{ResponseWriter: w, status: http.StatusOK}
	c.next.ServeHTTP(rec, r)
	if err := c.check(r, reqBody, bodyKept, rec); err != nil {
		c.opt.Report(fmt.Errorf("apicheck: %s %s → %d: %w", r.Method, r.URL.RequestURI(), rec.status, err))
	}
}

// check validates one exchange.
func (c *checker) check(r *http.Request, reqBody []byte, bodyKept bool, rec *recorder) error {
	route, params, err := c.d.router.FindRoute(r)
	if err != nil {
		slug := problemSlug(rec)
		if (rec.status == http.StatusNotFound && slug == "no_route") || (rec.status == http.StatusMethodNotAllowed && slug == "method_not_allowed") {
			return nil
		}
		return fmt.Errorf("the document does not describe this route: %v", err)
	}
	ctx := context.Background()
	in := &openapi3filter.RequestValidationInput{Request: r.Clone(ctx), PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, ExcludeRequestBody: !bodyKept,
			SkipSettingDefaults: true, MultiError: true}}
	in.Request.Body = io.NopCloser(bytes.NewReader(reqBody))
	reqErr := openapi3filter.ValidateRequest(ctx, in)
	var findings []string
	if reqErr != nil && rec.status < 400 {
		findings = append(findings, fmt.Sprintf("the service accepted a request the document refuses: %v", reqErr))
	}
	if err := c.checkRole(r, route.Operation, rec); err != nil {
		findings = append(findings, err.Error())
	}
	ct, _, _ := mime.ParseMediaType(rec.Header().Get("Content-Type"))
	stream := ct == "text/event-stream"
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: rec.status, Header: rec.Header(),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, ExcludeResponseBody: stream || rec.overflow, MultiError: true}}
	out.SetBodyBytes(rec.body.Bytes())
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		findings = append(findings, fmt.Sprintf("the answer does not match the document: %v (body %s)", err, clip(rec.body.Bytes())))
	}
	if stream && !rec.overflow {
		if err := c.checkFrames(route.Operation, rec.body.Bytes()); err != nil {
			findings = append(findings, err.Error())
		}
	}
	if len(findings) == 0 {
		return nil
	}
	return errors.New(strings.Join(findings, "; "))
}

// checkRole holds the answer to the operation's x-mcpfleet-roles for a key whose role is known.
func (c *checker) checkRole(r *http.Request, op *openapi3.Operation, rec *recorder) error {
	if c.opt.KeyRole == nil {
		return nil
	}
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return nil
	}
	role, ok := c.opt.KeyRole(key)
	if !ok {
		return nil
	}
	roles, err := Roles(op)
	if err != nil {
		return err
	}
	if len(roles) == 0 {
		return nil
	}
	slug := problemSlug(rec)
	if !slices.Contains(roles, role) {
		// Refused by role, or earlier (authentication, throttling, readiness).
		if slug == "forbidden" || rec.status == http.StatusUnauthorized || rec.status == http.StatusTooManyRequests || rec.status == http.StatusServiceUnavailable {
			return nil
		}
		return fmt.Errorf("the document says roles %v, but a %s key was answered %d %s", roles, role, rec.status, slug)
	}
	if slug == "forbidden" {
		return fmt.Errorf("the document says roles %v, but a %s key was refused as forbidden", roles, role)
	}
	return nil
}

// Roles returns an operation's x-mcpfleet-roles (empty: no key needed).
func Roles(op *openapi3.Operation) ([]string, error) {
	raw, ok := op.Extensions["x-mcpfleet-roles"]
	if !ok {
		return nil, fmt.Errorf("operation %s has no x-mcpfleet-roles", op.OperationID)
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("operation %s: x-mcpfleet-roles is not a list", op.OperationID)
	}
	out := make([]string, 0, len(list))
	for _, v := range list {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("operation %s: x-mcpfleet-roles holds a non-string", op.OperationID)
		}
		out = append(out, s)
	}
	return out, nil
}

// checkFrames validates the data of each server-sent event against x-mcpfleet-event-data: the
// "message" schema for frames without an event line, the schema named by the event line otherwise.
func (c *checker) checkFrames(op *openapi3.Operation, body []byte) error {
	raw, ok := op.Extensions["x-mcpfleet-event-data"].(map[string]any)
	if !ok {
		return nil
	}
	schemas := map[string]*openapi3.Schema{}
	for event, v := range raw {
		m, _ := v.(map[string]any)
		ref, _ := m["$ref"].(string)
		name, ok := strings.CutPrefix(ref, "#/components/schemas/")
		sr := c.d.T.Components.Schemas[name]
		if !ok || sr == nil || sr.Value == nil {
			return fmt.Errorf("x-mcpfleet-event-data %q names no schema of the document: %q", event, ref)
		}
		schemas[event] = sr.Value
	}
	var problems []string
	event, data := "message", ""
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), MaxBody)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data != "" {
				if err := validateFrame(c.d.T, schemas, event, data); err != nil {
					problems = append(problems, err.Error())
				}
			}
			event, data = "message", ""
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data += strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.New("event stream: " + strings.Join(problems, "; "))
}

func validateFrame(doc *openapi3.T, schemas map[string]*openapi3.Schema, event, data string) error {
	s, ok := schemas[event]
	if !ok {
		return fmt.Errorf("event %q is not in x-mcpfleet-event-data", event)
	}
	var v any
	if err := json.Unmarshal([]byte(data), &v); err != nil {
		return fmt.Errorf("event %q: data is not JSON: %v", event, err)
	}
	if err := s.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		return fmt.Errorf("event %q: data %s does not match: %v", event, clip([]byte(data)), err)
	}
	return nil
}

// problemSlug returns the slug of a problem answer, or of the JSON-RPC error of the MCP endpoint
// (error.data.type); "" for any other answer.
func problemSlug(rec *recorder) string {
	var p struct {
		Type  string `json:"type"`
		Error struct {
			Data struct {
				Type string `json:"type"`
			} `json:"data"`
		} `json:"error"`
	}
	if json.Unmarshal(rec.body.Bytes(), &p) != nil {
		return ""
	}
	if p.Type == "" {
		return p.Error.Data.Type
	}
	slug, _ := strings.CutPrefix(p.Type, httpapi.ProblemBase)
	return slug
}

func clip(b []byte) string {
	if len(b) > 400 {
		return string(b[:400]) + "…"
	}
	return string(b)
}

// recorder passes the answer through and keeps its status and up to MaxBody of its body. It flushes
// and unwraps, so streaming answers (server-sent events, ResponseController deadlines) work through it.
type recorder struct {
	http.ResponseWriter
	status   int
	wrote    bool
	body     bytes.Buffer
	overflow bool
}

func (w *recorder) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if !w.overflow {
		if w.body.Len()+len(b) > MaxBody {
			w.overflow = true
		} else {
			w.body.Write(b)
		}
	}
	return w.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (w *recorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// CheckType compares a Go type that a client encodes or decodes (a struct with json tags) with a
// schema of the document's components: every JSON field of the type must be a property of the schema,
// of a compatible JSON type, recursively for
// nested structs and slices. A field the schema requires that the type lacks is reported too when
// complete is set (for a request type: it must be able to send everything required). It returns one
// error naming every difference, or nil; a difference at a path in ignore (such as "Server.endpoint")
// is not one.
func (d *Document) CheckType(schema string, typ reflect.Type, complete bool, ignore ...string) error {
	sr := d.T.Components.Schemas[schema]
	if sr == nil || sr.Value == nil {
		return fmt.Errorf("the document has no schema %s", schema)
	}
	var problems []string
	checkType(schema, sr.Value, typ, complete, &problems)
	problems = slices.DeleteFunc(problems, func(p string) bool {
		path, _, _ := strings.Cut(p, " ")
		return slices.Contains(ignore, strings.TrimSuffix(path, ":"))
	})
	if len(problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(problems, "; "))
}

var (
	rawMessage = reflect.TypeFor[json.RawMessage]()
	timeType   = reflect.TypeFor[time.Time]()
)

func checkType(at string, s *openapi3.Schema, typ reflect.Type, complete bool, problems *[]string) {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if typ == rawMessage || typ.Kind() == reflect.Interface {
		return // any JSON value
	}
	if s.Type == nil && len(s.OneOf) > 0 { // {oneOf: [X, null]}
		for _, alt := range s.OneOf {
			if alt.Value != nil && !alt.Value.Type.Is("null") {
				s = alt.Value
			}
		}
	}
	want := jsonType(typ)
	if s.Type != nil && !s.Type.Includes(want) && !(want == "number" && s.Type.Includes("integer")) {
		*problems = append(*problems, fmt.Sprintf("%s: the Go type %s is JSON %s, the document says %v", at, typ, want, s.Type.Slice()))
		return
	}
	switch want {
	case "array":
		if s.Items != nil && s.Items.Value != nil {
			checkType(at+"[]", s.Items.Value, typ.Elem(), complete, problems)
		}
	case "object":
		if typ.Kind() != reflect.Struct {
			return
		}
		fields := map[string]bool{}
		for name, f := range jsonFields(typ) {
			fields[name] = true
			p := s.Properties[name]
			if p == nil || p.Value == nil {
				*problems = append(*problems, fmt.Sprintf("%s.%s is not in the document", at, name))
				continue
			}
			checkType(at+"."+name, p.Value, f.Type, complete, problems)
		}
		if complete {
			for _, r := range s.Required {
				if !fields[r] {
					*problems = append(*problems, fmt.Sprintf("%s.%s is required by the document but the Go type cannot send it", at, r))
				}
			}
		}
	}
}

// jsonFields returns the JSON fields of a struct, embedded structs flattened as encoding/json does
// (an outer field shadows an embedded one of the same name).
func jsonFields(typ reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	var embedded []reflect.StructField
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			embedded = append(embedded, f)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f
	}
	for _, e := range embedded {
		for name, f := range jsonFields(e.Type) {
			if _, shadowed := out[name]; !shadowed {
				out[name] = f
			}
		}
	}
	return out
}

func isInt(typ reflect.Type) bool {
	switch typ.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

func jsonType(typ reflect.Type) string {
	if typ == timeType {
		return "string"
	}
	switch typ.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	}
	if isInt(typ) {
		return "integer"
	}
	return "unknown"
}
