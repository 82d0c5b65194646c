"""Grading the labs for a class: `python -m batchlab.classroom grade SUBMISSIONS --lab lab2 --csv grades.csv`
(submissions rebuilt from the release, run sandboxed, evidence replayed by the grader's own checks)."""
