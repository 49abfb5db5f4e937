package actors

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/mcpfleet/mcpfleet/persistence"
)

// SignatureHeader carries "sha256=<hex>": HMAC-SHA256 of the request body under the webhook secret.
const SignatureHeader = "X-Mcpfleet-Signature"

// EventIDHeader carries the alert's stable event_id, for de-duplication by the receiver.
const EventIDHeader = "X-Mcpfleet-Event-Id"

// alertsActor delivers unhealthy alerts (TASK-OBS-007) from the outbox to the webhook, at least once:
// a row is marked delivered only after a 2xx answer, and a failed attempt is retried with exponential
// backoff (1 s doubling to 5 min). Each row is claimed before it is delivered (persistence.Store.ClaimAlerts),
// so several dispatchers on one database (nodes of a cluster) never deliver the same row concurrently. It sweeps on every alertQueued nudge and on its own tick, so alerts
// written before a crash are delivered after the restart.
type alertsActor struct {
	store    alertStore
	client   *http.Client
	url      string
	secret   []byte
	log      *slog.Logger
	tel      tel
	sweeping bool
	again    bool
	warned   bool
	flushers []*actor.PID
}

// flushAlerts asks for one full sweep of the outbox; it is answered with *drained when done.
type flushAlerts struct{}

type alertStore interface {
	TenantIDs(ctx context.Context) ([]uuid.UUID, error)
	ClaimAlerts(ctx context.Context, tenantID uuid.UUID, now time.Time, limit int) ([]persistence.Alert, error)
	MarkAlertDelivered(ctx context.Context, al persistence.Alert, attempts int, at time.Time) (bool, error)
	MarkAlertFailed(ctx context.Context, al persistence.Alert, attempts int, next time.Time, reason string) (bool, error)
}

type alertTick struct{}

type sweepDone struct{}

func newAlertsProps(store alertStore, client *http.Client, url, secret string, log *slog.Logger, t tel) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &alertsActor{store: store, client: client, url: url, secret: []byte(secret), log: log, tel: t}
	}, actor.WithMailbox(unboundedMailbox()))
}

func (a *alertsActor) Receive(ctx actor.Context) {
	handleChaos(ctx)
	switch msg := ctx.Message().(type) {
	case *alertQueued, *alertTick:
		if a.url == "" {
			if q, queued := msg.(*alertQueued); queued && !a.warned {
				a.log.WarnContext(q.trace.Context(), "an unhealthy alert is waiting in the outbox but MCPFLEET_ALERT_WEBHOOK_URL is not set; it will be delivered once it is")
				a.warned = true
			}
			return
		}
		if a.sweeping {
			a.again = true
			return
		}
		a.startSweep(ctx)
	case *flushAlerts:
		if a.url == "" {
			ctx.Respond(&drained{})
			return
		}
		a.flushers = append(a.flushers, ctx.Sender())
		if a.sweeping {
			a.again = true
			return
		}
		a.startSweep(ctx)
	case *sweepDone:
		a.sweeping = false
		if a.again {
			a.again = false
			a.startSweep(ctx)
			return
		}
		for _, p := range a.flushers {
			ctx.Send(p, &drained{})
		}
		a.flushers = nil
	}
}

func (a *alertsActor) startSweep(ctx actor.Context) {
	a.sweeping = true
	system, self := ctx.ActorSystem(), ctx.Self()
	go func() {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := a.sweep(c); err != nil {
			a.log.Warn("alert sweep failed; will retry", "err", err)
		}
		system.Root.Send(self, &sweepDone{})
	}()
}

// sweep runs outside the actor and touches only immutable fields.
func (a *alertsActor) sweep(ctx context.Context) error {
	tenants, err := a.store.TenantIDs(ctx)
	if err != nil {
		return err
	}
	for _, t := range tenants {
		// One alert claimed at a time: its lease (persistence.AlertLease) covers one delivery, and no other
		// deliverer sharing the database claims it meanwhile. A row failed in this sweep is due again only
		// after its backoff, so the loop ends.
		for {
			alerts, err := a.store.ClaimAlerts(ctx, t, time.Now(), 1)
			if err != nil {
				return err
			}
			if len(alerts) == 0 {
				break
			}
			if err := a.deliverClaimed(ctx, alerts[0]); err != nil {
				return err
			}
		}
	}
	return nil
}

// deliverClaimed delivers one claimed alert and records the outcome under its claim.
func (a *alertsActor) deliverClaimed(ctx context.Context, al persistence.Alert) error {
	attempts := al.Attempts + 1
	var mine bool
	var err error
	if derr := a.deliver(ctx, al, attempts); derr != nil {
		backoff := min(time.Duration(1<<min(attempts-1, 9))*time.Second, 5*time.Minute)
		a.log.WarnContext(eventContext(ctx, al), "alert delivery failed", "event_id", al.EventID, "attempt", attempts, "retry_in", backoff.String(), "err", derr)
		mine, err = a.store.MarkAlertFailed(ctx, al, attempts, time.Now().Add(backoff), derr.Error())
	} else {
		mine, err = a.store.MarkAlertDelivered(ctx, al, attempts, time.Now())
	}
	if err == nil && !mine {
		a.log.WarnContext(eventContext(ctx, al), "alert claim expired before its outcome was recorded; another deliverer has it", "event_id", al.EventID)
	}
	return err
}

func (a *alertsActor) deliver(ctx context.Context, al persistence.Alert, attempt int) (err error) {
	ctx, span := a.tel.startDelivery(ctx, al, attempt)
	defer func() { a.tel.endDelivery(ctx, span, attempt, err) }()
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(c, http.MethodPost, a.url, bytes.NewReader(al.Payload))
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "mcpfleet-alerts/1")
	req.Header.Set(EventIDHeader, al.EventID.String())
	req.Header.Set(SignatureHeader, Sign(a.secret, al.Payload))
	injectTraceparent(c, req.Header) // W3C traceparent: the alert.deliver span, in the transition's trace
	resp, err := a.client.Do(req)
	if err != nil {
		return fmt.Errorf("post: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("webhook answered %d", resp.StatusCode)
	}
	return nil
}

// Sign returns the signature header value for body: "sha256=" and the hex HMAC-SHA256 under secret.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}
