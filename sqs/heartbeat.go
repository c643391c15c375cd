package sqs

import (
	"context"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// heartbeat extends the visibility of a batch's messages every
// Options.Heartbeat until stopped. It is started once per batch and
// stopped, and waited for, on every exit path of the batch, before any
// message is deleted or has its visibility changed: a late extension
// would otherwise undo a retry's shorter visibility.
type heartbeat struct {
	stop func()
	wg   sync.WaitGroup
}

// startHeartbeat starts extending msgs' visibility on c's API.
func (c *Consumer) startHeartbeat(ctx context.Context, msgs []types.Message) *heartbeat {
	hctx, cancel := context.WithCancel(ctx)
	h := &heartbeat{stop: cancel}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		t := time.NewTicker(c.opts.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-hctx.Done():
				return
			case <-t.C:
			}
			for i := range msgs {
				c.setVisibility(hctx, &msgs[i], c.opts.Visibility, "heartbeat")
				if hctx.Err() != nil {
					return
				}
			}
		}
	}()
	return h
}

// end stops the heartbeat and waits for it; it may be called more than
// once.
func (h *heartbeat) end() {
	h.stop()
	h.wg.Wait()
}

// setVisibility makes m invisible for d from now, logging and counting a
// failure (the message may then come back early: a duplicate, suppressed).
func (c *Consumer) setVisibility(ctx context.Context, m *types.Message, d time.Duration, why string) {
	_, err := c.api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(c.opts.QueueURL), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: seconds(d),
	})
	switch {
	case err == nil:
		c.stats.visibilityChanges.Add(1)
	case ctx.Err() == nil:
		c.stats.visibilityFailures.Add(1)
		c.opts.Logger.Warn("oncekv: sqs: visibility change failed; the message may be delivered again, and is then suppressed as a duplicate",
			"handler", c.opts.Handler, "why", why, "message_id", aws.ToString(m.MessageId), "err", err)
	}
}

// seconds rounds d up to whole seconds within SQS's visibility range, 0 to
// 12 hours.
func seconds(d time.Duration) int32 {
	return int32(min(max((d+time.Second-1)/time.Second, 0), 12*3600))
}
