-- step: reconcile_mark_off_path
-- engine: sqlite (the target, in the run's last transaction, with the ledger row)
-- reads: plan.plan_off_path (r25_off_path.sql's marks that change, staged by r65_stage.sql), lcm_messages
-- produces: lcm_messages.metadata marked: the mark set on rows a branch left, taken off rows back on the path
-- key: target message id
-- why: the target keeps what a branch left behind, and says which rows those are (docs/mapping.md, "Branches").
--      A mark is a change in place like 87_apply_changes.sql's: the run's provenance triggers keep each row's
--      metadata as it was before (lcm_etl/store/provenance.py), so `undo` puts it back. In the last transaction:
--      a run that fails before it leaves no mark, and a session with nothing new needs no batch for its marks.
--      The key is removed rather than set false, so a row back on the path holds the metadata it was written with.
-- count: off_path_marks
UPDATE lcm_messages
SET metadata = CAST(lcm_etl_utf8_json(CAST(
      CASE WHEN c.off THEN json_set(metadata, '$.off_path', json('true')) ELSE json_remove(metadata, '$.off_path') END
      AS BLOB)) AS TEXT)
FROM plan.plan_off_path c
WHERE lcm_messages.id = c.tid AND json_valid(lcm_messages.metadata);
