package pgtest

// Sweep exposes sweep to the external tests.
var Sweep = sweep
