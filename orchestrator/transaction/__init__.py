"""The deploy transaction on one container, and what is built on it: rollback (the
same switch + ready + gate with an earlier release), `deploy --replace`, the
recovery of an interrupted run, and the server actions (stop, start, restart, remove).

  lock -> recover an interrupted run -> preflight -> write release -> cat-verify
  -> journal -> switch (stop old by PID, wait for its GPU memory, point
  `current`, start) -> ready -> gate -> keep, or go back to the previous release.

A failure or a stop request before the switch leaves the target untouched;
after it, the previous release is restored and gated with its own settings.
The journal on the target records each step of the switch, so a run that dies
in it is undone by the next run there.

Rooms: `options` (what the run was asked), `deployment` (the one container a run
works on), `releases` (a release's files on the target), `switch`, `decision` (pure:
keep or go back), `target` (deploy and rollback), `replace`, `recovery`, `actions`,
`outcome` (what happened), `guard` (how a run ends when it does not finish).
"""
