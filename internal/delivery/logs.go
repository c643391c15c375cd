package delivery

import (
	"context"
	"log/slog"
	"time"
)

// LogDuplicate logs, at info, a delivery the store answered as a
// duplicate: the handler, the key, how long ago the key was first seen
// (age_ms), then where the delivery came from (the adapter's attributes:
// a partition and offset, a message id).
func LogDuplicate(ctx context.Context, l *slog.Logger, handler, key string, age time.Duration, where ...slog.Attr) {
	attrs := append([]slog.Attr{slog.String("handler", handler), slog.String("key", key),
		slog.Int64("age_ms", age.Milliseconds())}, where...)
	l.LogAttrs(ctx, slog.LevelInfo, "duplicate suppressed", attrs...)
}
