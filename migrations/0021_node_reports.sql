-- node_reports: the last inventory report applied for each node (applyInventory's input: the NodeDevices spec). The
-- atoms a report stands for depend on the node's Pool (sharing, slotsPerGpu); when those change, the Pool's upsert
-- derives the atoms of its nodes again from these reports, in its own transaction, without waiting for a new report.
CREATE TABLE node_reports (
  node_id text PRIMARY KEY REFERENCES nodes (id),
  report jsonb NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT compute_now()
);
