package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// env is a getenv over a map: a missing key is unset.
func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// row is one case: X set to v (or unset), the value read and whether an error is recorded.
type row[T comparable] struct {
	v       string
	unset   bool
	want    T
	wantErr bool
}

// check runs read against an environment holding X as each row says and compares the value and
// whether an error naming X and what it wants was recorded.
func check[T comparable](t *testing.T, kind string, read func(*Env) T, rows []row[T]) {
	t.Helper()
	for _, tt := range rows {
		m := map[string]string{}
		if !tt.unset {
			m["X"] = tt.v
		}
		e := New(env(m))
		got := read(e)
		err := e.Err()
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("%s X=%q (unset %v): %v, %v; want %v, error %v", kind, tt.v, tt.unset, got, err, tt.want, tt.wantErr)
		}
		if err != nil && (!strings.Contains(err.Error(), "X=") || !strings.Contains(err.Error(), "want ")) {
			t.Errorf("%s X=%q: error %q does not name the variable and what it wants", kind, tt.v, err)
		}
	}
}

func TestConfigInt(t *testing.T) {
	read := func(e *Env) int { return e.Int("X", 4, 2, 1000) }
	check(t, "Int", read, []row[int]{
		{"", true, 4, false},  // unset: the default
		{"", false, 4, false}, // empty: the default
		{"  ", false, 4, false},
		{"7", false, 7, false},
		{" 7 ", false, 7, false},
		{"2", false, 2, false},
		{"1000", false, 1000, false},
		{"4.5", false, 4, true}, // refused, not truncated to 4
		{"4.0", false, 4, true},
		{"1e3", false, 4, true},
		{"-3", false, 4, true},
		{"1", false, 4, true},
		{"1001", false, 4, true},
		{"4x", false, 4, true},
		{"0x10", false, 4, true},
	})
}

func TestConfigNumber(t *testing.T) {
	read := func(e *Env) float64 { return e.Number("X", 2, 0.001, 1e6) }
	check(t, "Number", read, []row[float64]{
		{"", true, 2, false}, {"", false, 2, false}, {"0.5", false, 0.5, false}, {"1e3", false, 1000, false},
		{"0", false, 2, true}, {"-1", false, 2, true}, {"NaN", false, 2, true}, {"Inf", false, 2, true}, {"two", false, 2, true},
	})
}

func TestConfigFraction(t *testing.T) {
	read := func(e *Env) float64 { return e.Fraction("X", 0) }
	check(t, "Fraction", read, []row[float64]{
		{"", true, 0, false}, {"", false, 0, false}, {"0", false, 0, false}, {"0.25", false, 0.25, false}, {"1", false, 1, false},
		{"1.01", false, 0, true}, {"-0.1", false, 0, true}, {"NaN", false, 0, true}, {"25%", false, 0, true},
	})
}

func TestConfigDuration(t *testing.T) {
	read := func(e *Env) time.Duration { return e.Duration("X", 10*time.Second) }
	check(t, "Duration", read, []row[time.Duration]{
		{"", true, 10 * time.Second, false}, {"", false, 10 * time.Second, false},
		{"500ms", false, 500 * time.Millisecond, false}, {"1h2m", false, time.Hour + 2*time.Minute, false}, {"0", false, 0, false},
		{"10", false, 10 * time.Second, true}, {"-1s", false, 10 * time.Second, true}, {"soon", false, 10 * time.Second, true},
	})
}

func TestConfigBool(t *testing.T) {
	read := func(e *Env) bool { return e.Bool("X", false) }
	check(t, "Bool", read, []row[bool]{
		{"", true, false, false}, {"", false, false, false}, {"true", false, true, false}, {"1", false, true, false},
		{"FALSE", false, false, false}, {"yes", false, false, true}, {"on", false, false, true},
	})
}

func TestConfigAddr(t *testing.T) {
	read := func(e *Env) string { return e.Addr("X", "127.0.0.1:8080") }
	check(t, "Addr", read, []row[string]{
		{"", true, "127.0.0.1:8080", false}, {"", false, "127.0.0.1:8080", false},
		{"0.0.0.0:9000", false, "0.0.0.0:9000", false}, {":6060", false, ":6060", false}, {"[::1]:1", false, "[::1]:1", false},
		{"localhost", false, "127.0.0.1:8080", true}, {"host:", false, "127.0.0.1:8080", true}, {"::1", false, "127.0.0.1:8080", true},
	})
}

func TestConfigURL(t *testing.T) {
	read := func(e *Env) string { return e.URL("X") }
	check(t, "URL", read, []row[string]{
		{"", true, "", false}, {"", false, "", false},
		{"https://hooks.example/x", false, "https://hooks.example/x", false}, {"http://127.0.0.1:9/", false, "http://127.0.0.1:9/", false},
		{"ftp://x/", false, "", true}, {"https:///path", false, "", true}, {"hooks.example", false, "", true}, {"http://%zz", false, "", true},
	})
}

// Every bad variable is reported, not only the first; a secret's value never is.
func TestConfigErrorsNameEveryVariable(t *testing.T) {
	e := New(env(map[string]string{"A": "4.5", "B": "x", "K": "s3cr3t"}))
	e.Int("A", 1, 1, 10)
	e.Duration("B", time.Second)
	e.Secret("K", func(string) error { return errErr })
	e.Parse("L", "anything", func(string) error { t.Error("parse called for an unset variable"); return nil })
	err := e.Err()
	if err == nil || !strings.Contains(err.Error(), `A="4.5"`) || !strings.Contains(err.Error(), `B="x"`) || !strings.Contains(err.Error(), "K:") {
		t.Fatalf("errors %v", err)
	}
	if strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("the secret's value is in the error: %v", err)
	}
}

var errErr = errors.New("not a key")

// Or keeps a positive value and falls back for zero and for a negative one.
func TestConfigOr(t *testing.T) {
	if Or(3, 7) != 3 || Or(0, 7) != 7 || Or(-1, 7) != 7 {
		t.Error("Or on int")
	}
	if Or(time.Second, time.Minute) != time.Second || Or(0, time.Minute) != time.Minute || Or(-time.Second, time.Minute) != time.Minute {
		t.Error("Or on durations")
	}
	if Or(0.5, 2.0) != 0.5 || Or(0.0, 2.0) != 2.0 {
		t.Error("Or on floats")
	}
}
