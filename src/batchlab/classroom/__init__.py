"""Grading the labs for a class: `python -m batchlab.classroom grade SUBMISSIONS --lab lab2 --csv grades.csv`.

* `notebook` — rebuild a submission for grading: every locked cell (instructions, setup, check
  cells) restored from the release, the learner's answer cells kept, outputs dropped;
* `sandbox` — run one submission as a separate process that sees only its own throwaway folder
  (a container when Docker or Podman works, else bubblewrap), with a memory limit and timeouts;
* `execute` — what runs inside the sandbox: a fresh kernel executes the notebook cell by cell,
  with a per-cell timeout, going on past errors;
* `grade` — scores decided in the grader's own process: the check cells' evidence is replayed
  with the grader's unpatched checks (`batchlab.labs._core.replay`), then a gradebook CSV (one
  row per learner, one column per question, total, max) and a Chinese feedback file per learner.
"""
