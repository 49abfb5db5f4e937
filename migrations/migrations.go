// Package migrations holds mcpfleet's schema as numbered SQL files and applies them with goose.
//
// The files are embedded, so a binary migrates without its source tree. Migrations must run as the
// owning role (MCPFLEET_ADMIN_DATABASE_URL); they create the runtime role cyberos_app and grant it
// exactly what the service needs, so row-level security really applies to the service.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver goose needs
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// AppRole is the runtime role the migrations create and grant to.
const AppRole = "cyberos_app"

//go:embed *.sql
var files embed.FS

// UpTo applies the pending migrations up to and including version, like Up; for tests of a migration
// against a database as an earlier release left it.
func UpTo(ctx context.Context, databaseURL string, version int64) (int, error) {
	return up(ctx, databaseURL, version)
}

// Up applies every pending migration to the database at databaseURL, which must be an owner connection.
// Concurrent callers are serialised by a PostgreSQL advisory lock, so two processes migrating the same
// database at once is safe. It returns the number of migrations applied.
func Up(ctx context.Context, databaseURL string) (int, error) {
	return up(ctx, databaseURL, 0)
}

// up applies the pending migrations up to version (0: all).
func up(ctx context.Context, databaseURL string, version int64) (int, error) {
	db, err := sql.Open("pgx", databaseURL)
	if err != nil {
		return 0, fmt.Errorf("migrate: open: %w", err)
	}
	defer db.Close()
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return 0, fmt.Errorf("migrate: locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithSessionLocker(locker))
	if err != nil {
		return 0, fmt.Errorf("migrate: %w", err)
	}
	var res []*goose.MigrationResult
	if version > 0 {
		res, err = p.UpTo(ctx, version)
	} else {
		res, err = p.Up(ctx)
	}
	if err != nil {
		return len(res), fmt.Errorf("migrate: up: %w", err)
	}
	return len(res), nil
}
