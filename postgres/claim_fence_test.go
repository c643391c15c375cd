package postgres_test

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncekv/oncekv/postgres"
)

func fenceWorker(ctx context.Context, s *postgres.Store, pool *pgxpool.Pool) error { return nil }
