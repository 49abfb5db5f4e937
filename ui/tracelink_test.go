package ui_test

import (
	"testing"

	"github.com/mcpfleet/mcpfleet/ui"
)

func TestParseTraceURL(t *testing.T) {
	const id = "0af7651916cd43dd8448eb211c80319c"
	for _, c := range []struct {
		template, want string // want "" with ok: no link; bad: refused
		bad            bool
	}{
		{template: "", want: ""},
		{template: "http://jaeger:16686/trace/{trace_id}", want: "http://jaeger:16686/trace/" + id},
		{template: "https://tempo.example/explore?q={trace_id}&also={trace_id}", want: "https://tempo.example/explore?q=" + id + "&also=" + id},
		{template: "http://jaeger:16686/trace/", bad: true},               // no placeholder
		{template: "jaeger:16686/trace/{trace_id}", bad: true},            // no scheme
		{template: "javascript:alert('{trace_id}')", bad: true},           // not http
		{template: "http:///trace/{trace_id}", bad: true},                 // no host
		{template: "http://jaeger/trace/{trace_id}/{span_id}", bad: true}, // another placeholder
		{template: "http://jaeger/trace/{traceid}", bad: true},            // misspelt
		{template: "http://jae ger/trace/{trace_id}", bad: true},          // not a URL
		{template: "ftp://jaeger/trace/{trace_id}", bad: true},            // not http
		{template: "{trace_id}", bad: true},                               // nothing but the id
		{template: "https://jaeger.example:8443/ui/trace/{trace_id}", want: "https://jaeger.example:8443/ui/trace/" + id},
	} {
		l, err := ui.ParseTraceURL(c.template)
		if c.bad {
			if err == nil {
				t.Errorf("%q accepted", c.template)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.template, err)
			continue
		}
		if got := l.URL(id); got != c.want {
			t.Errorf("%q: URL = %q, want %q", c.template, got, c.want)
		}
	}
	l, _ := ui.ParseTraceURL("http://jaeger:16686/trace/{trace_id}")
	for _, notID := range []string{"", "0AF7651916CD43DD8448EB211C80319C", "0af7651916cd43dd", "0af7651916cd43dd8448eb211c80319c/../x", "\"><script>"} {
		if got := l.URL(notID); got != "" {
			t.Errorf("URL(%q) = %q, want no link", notID, got)
		}
	}
}
