package persistence

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// refusingDB is a beginner that fails the test if a transaction is opened.
type refusingDB struct{ t *testing.T }

func (d refusingDB) BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error) {
	d.t.Error("a transaction was opened for a tenant transaction without a tenant")
	return nil, errors.New("refused")
}

func (d refusingDB) SendBatch(_ context.Context, b *pgx.Batch) pgx.BatchResults {
	d.t.Error("a batch was sent for a tenant transaction without a tenant")
	return pgx.FailedBatchResults(b, errors.New("refused"))
}

// TestTenantTxWithoutTenantFailsClosed: both helpers refuse a nil tenant before opening a transaction,
// and the refusal is permanent (the writer must not retry it, Commit isolates the command).
func TestTenantTxWithoutTenantFailsClosed(t *testing.T) {
	ctx := context.Background()
	db := refusingDB{t}
	step := func(tenant uuid.UUID) tenantStep {
		return tenantStep{tenant: tenant, queue: func(*pgx.Batch) {}, read: func(pgx.BatchResults) error { return nil }}
	}
	for name, run := range map[string]func() error{
		"inTenantTx": func() error {
			return inTenantTx(ctx, db, pgx.TxOptions{}, uuid.Nil, func(pgx.Tx) error {
				t.Error("fn ran without a tenant")
				return nil
			})
		},
		"inTenantBatch, one step of several without a tenant": func() error {
			return inTenantBatch(ctx, db, []tenantStep{step(uuid.New()), step(uuid.Nil), step(uuid.New())})
		},
		"SetTenant": func() error { return SetTenant(ctx, nil, uuid.Nil) },
	} {
		err := run()
		if !errors.Is(err, ErrNoTenant) {
			t.Errorf("%s: err = %v, want ErrNoTenant", name, err)
		}
		if IsTransient(err) {
			t.Errorf("%s: ErrNoTenant is transient", name)
		}
	}
}
