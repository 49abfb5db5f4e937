package ui

import (
	"errors"
	"net/url"
	"regexp"
	"strings"

	"github.com/mcpfleet/mcpfleet/config"
)

// TraceIDPlaceholder is what a trace URL template (MCPFLEET_TRACE_URL) holds where the trace id goes.
const TraceIDPlaceholder = "{trace_id}"

// traceIDRE is a W3C trace id as the service stores it: 32 lowercase hex digits.
var traceIDRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TraceLinks turns trace ids into links to a tracing UI, from a template such as
// http://jaeger:16686/trace/{trace_id}. Its zero value links nothing: trace ids are shown as text.
type TraceLinks struct{ template string }

// ParseTraceURL checks a trace URL template: it must hold TraceIDPlaceholder (once or more), and with a
// trace id in its place be an absolute http or https URL with a host. "" is no template (no links).
func ParseTraceURL(template string) (TraceLinks, error) {
	if template == "" {
		return TraceLinks{}, nil
	}
	if !strings.Contains(template, TraceIDPlaceholder) {
		return TraceLinks{}, errors.New("the template does not contain " + TraceIDPlaceholder)
	}
	sample := strings.ReplaceAll(template, TraceIDPlaceholder, "4bf92f3577b34da6a3ce929d0e0e4736")
	if err := config.CheckHTTPURL(sample); err != nil {
		return TraceLinks{}, err
	}
	if strings.ContainsAny(sample, "{}") {
		return TraceLinks{}, errors.New("the template has a placeholder other than " + TraceIDPlaceholder)
	}
	return TraceLinks{template: template}, nil
}

// Template returns the template ("" for none), for the script, which links the live feed's trace ids.
func (l TraceLinks) Template() string { return l.template }

// URL returns the link to traceID, or "" when there is no template or traceID is not a trace id (a
// malformed one is never put into a link).
func (l TraceLinks) URL(traceID string) string {
	if l.template == "" || !traceIDRE.MatchString(traceID) {
		return ""
	}
	return strings.ReplaceAll(l.template, TraceIDPlaceholder, url.PathEscape(traceID))
}

// traceView is a trace id as a page shows it: linked when URL is set, as text otherwise, a dash when
// there is none.
type traceView struct {
	ID  string
	URL string
}

func (l TraceLinks) view(traceID string) traceView {
	return traceView{ID: traceID, URL: l.URL(traceID)}
}
