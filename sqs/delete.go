package sqs

import (
	"context"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// delete deletes msgs (at most 10, one receive's worth) with
// DeleteMessageBatch. An entry that failed on SQS's side (SenderFault
// false) is tried once more; what still failed, or that SQS reported in
// neither list, is counted and logged: those messages come back when their
// visibility ends, and are then suppressed as duplicates.
func (c *Consumer) delete(ctx context.Context, msgs []*types.Message) {
	for attempt := 1; len(msgs) > 0; attempt++ {
		entries := make([]types.DeleteMessageBatchRequestEntry, len(msgs))
		for i, m := range msgs {
			entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
		}
		out, err := c.api.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(c.opts.QueueURL), Entries: entries})
		if err != nil {
			c.deleteFailed(msgs, "the whole batch", err)
			return
		}
		deleted := make(map[string]bool, len(out.Successful))
		for _, e := range out.Successful {
			deleted[aws.ToString(e.Id)] = true
		}
		c.stats.deleted.Add(uint64(len(deleted)))
		var again []*types.Message
		for _, e := range out.Failed {
			i, err := strconv.Atoi(aws.ToString(e.Id))
			if err != nil || i < 0 || i >= len(msgs) || deleted[aws.ToString(e.Id)] {
				continue // not an id of ours
			}
			deleted[aws.ToString(e.Id)] = true // settled, one way or the other
			if !e.SenderFault && attempt == 1 {
				again = append(again, msgs[i])
				continue
			}
			c.deleteFailed(msgs[i:i+1], aws.ToString(e.Code), nil)
		}
		for i, m := range msgs {
			if !deleted[strconv.Itoa(i)] {
				c.deleteFailed([]*types.Message{m}, "in neither Successful nor Failed", nil)
			}
		}
		msgs = again
	}
}

func (c *Consumer) deleteFailed(msgs []*types.Message, why string, err error) {
	c.stats.deleteFailures.Add(uint64(len(msgs)))
	for _, m := range msgs {
		c.opts.Logger.Warn("oncekv: sqs: delete failed; the message is committed in the store and, when it comes back, suppressed as a duplicate",
			"handler", c.opts.Handler, "message_id", aws.ToString(m.MessageId), "why", why, "err", err)
	}
}
