"""Training one trial: the AMP policy, the compiled step, batches, metric capture, starts and snapshots."""
