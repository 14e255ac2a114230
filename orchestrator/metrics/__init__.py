"""The acceptance gate's measurements, kept in three steps as Argo Rollouts analysis does.

scrape: /metrics text -> cumulative counters (or "not drafting", or "could not read");
evaluate: two scrapes -> one measurement (the distribution of accepted lengths);
assess: measurements per scrape interval -> verdict with a confidence bound and a reason.
"""
