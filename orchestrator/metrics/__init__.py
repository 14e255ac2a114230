"""The gate's measurements, kept in three steps as Argo Rollouts analysis does.

scrape: /metrics text -> cumulative counters (or "not drafting", or "could not read"),
and the running batch;
evaluate: two scrapes -> one measurement (the distribution of accepted lengths);
assess: measurements per scrape interval -> verdict with a confidence bound and a reason.
Speed: `speed` (streamed requests -> per-stream and total tokens per second with bounds)
and `speedup` (those figures against a reference -> the speed verdict).
"""
