package gateway

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/persistence"
)

// failedResult is the failed tool result a model reads in place of an answer: one note naming the tool,
// the server, the outcome class and the reason.
func failedResult(call persistence.Call, class, reason string) persistence.CallResult {
	reason = strings.TrimSuffix(strings.TrimSpace(reason), ".")
	content := fmt.Sprintf("[mcpfleet: the call to tool %q of server %q failed (%s): %s]", call.Tool, call.ServerName, class, reason)
	content, truncated := cut(content, false)
	return persistence.CallResult{Content: content, IsError: true, Truncated: truncated}
}

// cut bounds content to mcpclient.MaxShapedBytes on a UTF-8 boundary; notes come first, so they survive.
func cut(content string, truncated bool) (string, bool) {
	if len(content) <= mcpclient.MaxShapedBytes {
		return content, truncated
	}
	n := mcpclient.MaxShapedBytes
	for n > 0 && !utf8.RuneStart(content[n]) {
		n--
	}
	return content[:n], true
}

// expiredResult is the outcome of a call nobody approved within its approval window.
func expiredResult(window time.Duration) func(persistence.Call) (string, persistence.CallResult) {
	return func(c persistence.Call) (string, persistence.CallResult) {
		reason := fmt.Sprintf("nobody approved the call within its approval window (%s): it was not sent, the server was not asked", window)
		return reason, failedResult(c, "approval_expired", reason)
	}
}

// interruptedResult is the outcome of a call a previous process left running.
func interruptedResult(c persistence.Call) (string, persistence.CallResult) {
	reason := "the service stopped while the call was in flight: the server may or may not have received it, and may have acted on it; it is never re-sent"
	if c.StartedAt == nil {
		reason = "the service stopped before the call was sent: the server was not asked; it is never re-sent"
	}
	return reason, failedResult(c, "interrupted", reason)
}
