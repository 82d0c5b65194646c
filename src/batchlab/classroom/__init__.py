"""Grading the labs for a class: `python -m batchlab.classroom grade SUBMISSIONS --lab lab2 --csv grades.csv`.

    notebook  a submission rebuilt from the release (locked cells restored, answers kept)
    sandbox   one submission run as a confined process (container or bubblewrap)
    execute   what runs in the sandbox: a fresh kernel, cell by cell, past errors
    grade     evidence replayed with the grader's own checks; gradebook CSV and Chinese feedback
"""
