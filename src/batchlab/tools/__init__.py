"""batchlab.tools: author-time command lines; nothing here is imported by a notebook.

    python -m batchlab.tools.labgen solutions labs [--check]   # labs/ from solutions/ (make handout)
    python -m batchlab.tools.nbtools execute NOTEBOOK          # re-execute and store outputs (make execute)
    python -m batchlab.tools.prose_numbers NOTEBOOK...         # prose numbers without a source
"""
