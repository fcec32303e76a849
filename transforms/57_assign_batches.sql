-- step: assign_batches — shared by migrate (after 55_batch_weights) and reconcile (after r55_batch_weights)
-- engine: duckdb (plan)
-- reads: batch_input(message_id, session_id, new_rank, weight)
-- produces: write_messages(message_id, session_id, new_rank, weight, batch) — every new message with the
--           batch (one SQLite transaction on an existing target) it lands in
-- key: message_id
-- why: a live Remnic waits at most 5 s for the write lock (busy_timeout), so one transaction carries about
--      $budget rows. Sessions are packed whole while they fit; a larger session is cut in turn order.
--      A session's summaries and its boundary event go into its last batch (60_batches.sql), after all
--      its messages, so a run killed between batches leaves every session complete, untouched, or a
--      turn-order prefix without its boundary event — which the next run completes.
CREATE OR REPLACE TABLE write_messages AS
WITH c AS (
  SELECT *, sum(weight) OVER (ORDER BY session_id, new_rank ROWS UNBOUNDED PRECEDING) - weight AS cum_before,
         sum(weight) OVER (PARTITION BY session_id) AS session_weight
  FROM batch_input
)
SELECT message_id, session_id, new_rank, weight,
       CAST(floor(CASE WHEN session_weight <= $budget
                       THEN min(cum_before) OVER (PARTITION BY session_id)
                       ELSE cum_before END / $budget) AS BIGINT) AS batch
FROM c;
