package mcpclient_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpfleet/mcpfleet/mcpclient"
	"github.com/mcpfleet/mcpfleet/mcpclient/mcptest"
)

type panickingRecorder struct{ calls atomic.Int32 }

func (r *panickingRecorder) RecordContact(context.Context, time.Time, time.Duration) {
	r.calls.Add(1)
	panic("table locked")
}

// blockingRecorder blocks until its context ends, then reports it.
type blockingRecorder struct{ ended chan error }

func (r *blockingRecorder) RecordContact(ctx context.Context, _ time.Time, _ time.Duration) {
	<-ctx.Done()
	r.ended <- ctx.Err()
}

func TestRecorderIsRequired(t *testing.T) {
	var typedNil *recorder
	for name, rec := range map[string]mcpclient.Recorder{"nil": nil, "typed nil": typedNil} {
		t.Run(name, func(t *testing.T) {
			_, err := mcpclient.New(mcpclient.Config{Endpoint: "https://mcp.example.com/mcp"}, rec)
			if !errors.Is(err, mcpclient.ErrInvalidConfig) {
				t.Errorf("New with a %s recorder: err = %v, want ErrInvalidConfig", name, err)
			}
		})
	}
}

func TestPanickingRecorderDoesNotFailTheCall(t *testing.T) {
	s := mcptest.Tools(t)
	rec := &panickingRecorder{}
	c, err := mcpclient.New(mcpclient.Config{Endpoint: s.URL, AllowHosts: []string{"127.0.0.1"}}, rec)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.CallTool(testContext(t), "text", nil)
	if err != nil {
		t.Fatalf("CallTool failed because the recorder panicked: %v", err)
	}
	if len(got.Content) != 1 || got.Content[0].Text != "hello from text" {
		t.Errorf("content = %+v", got.Content)
	}
	if n := rec.calls.Load(); n != 1 {
		t.Errorf("recorder called %d times, want 1", n)
	}
}

func TestBlockingRecorderDoesNotHoldTheCall(t *testing.T) {
	s := mcptest.Tools(t)
	rec := &blockingRecorder{ended: make(chan error, 1)}
	c, err := mcpclient.New(mcpclient.Config{
		Endpoint: s.URL, AllowHosts: []string{"127.0.0.1"}, RecordTimeout: 50 * time.Millisecond,
	}, rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CallTool(testContext(t), "text", nil); err != nil {
		t.Fatalf("CallTool failed because the recorder blocked: %v", err)
	}
	select {
	case err := <-rec.ended:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("recorder context ended with %v, want DeadlineExceeded", err)
		}
	case <-testContext(t).Done():
		t.Fatal("the recorder's context never ended")
	}
}

// The recorder's context survives the caller's: a caller that cancels as
// soon as the answer is back must not cost the contact.
func TestRecorderContextIsNotTheCallersCancellation(t *testing.T) {
	s := mcptest.Modern(t)
	got := make(chan error, 1)
	rec := recorderFunc(func(ctx context.Context, _ time.Time, _ time.Duration) { got <- ctx.Err() })
	c, err := mcpclient.New(mcpclient.Config{Endpoint: s.URL, AllowHosts: []string{"127.0.0.1"}}, rec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	if _, err := c.Handshake(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Errorf("recorder context already ended: %v", err)
	}
}

type recorderFunc func(context.Context, time.Time, time.Duration)

func (f recorderFunc) RecordContact(ctx context.Context, at time.Time, d time.Duration) {
	f(ctx, at, d)
}

func TestRecorderStampsTheAnswer(t *testing.T) {
	s := mcptest.Modern(t)
	c, rec := newClient(t, s.URL)
	before := time.Now()
	report, err := c.Handshake(testContext(t))
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	contacts := rec.all()
	if len(contacts) != 1 {
		t.Fatalf("recorded %d contacts, want 1", len(contacts))
	}
	if at := contacts[0].at; at.Before(before) || at.After(after) {
		t.Errorf("contact at %v, outside the operation [%v, %v]", at, before, after)
	}
	if contacts[0].latency != report.Latency {
		t.Errorf("recorded latency %v, report says %v", contacts[0].latency, report.Latency)
	}
}
