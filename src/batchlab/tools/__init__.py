"""batchlab.tools: author-time command lines (`labgen`, `nbtools`, `prose_numbers`); nothing here is
imported by a notebook."""
