// Package mcpclient is the MCP client the service uses to reach the servers
// of its fleet: a connection test ([Client.Handshake]), a catalogue read
// ([Client.ListTools]) and a tool call ([Client.CallTool]).
//
// It is built on the official Go SDK over Streamable HTTP only (stdio is
// ruled out on purpose). It negotiates with server/discover (MCP 2026-07-28)
// first and falls back to initialize + notifications/initialized, so it
// talks to servers written with other SDKs and earlier revisions, including
// those that answer every POST with a one-event text/event-stream and
// require the Mcp-Session-Id they issued.
//
// Liveness is observed, not inferred (ADR-154): every successful operation
// reports one contact — when the answer that completed it arrived and how
// long that round trip took — to the [Recorder] the Client was built with;
// a failed operation reports nothing. Every failure is an [*Error] with one
// of five classes (transport, timeout, auth, protocol, invalid_response) and
// a reason fit to show an operator.
//
// Around the client: [ShapeResult] makes a tool result fit for a model
// (text only, a leading note about dropped blocks, bounded size),
// [CheckEndpoint] is the endpoint policy (also enforced when dialling), and
// package toolschema normalises tool input schemas into the supported
// subset. Package mcptest holds real MCP servers for tests.
package mcpclient
