"""batchlab.course: the chapters' experiments, built from `sim`, `load`, `probe` and `theory`;
they return rows for the notebooks to print and `plotting` to draw.

`presets` (shared service models), `capacity` (KV accounting, cost: ch. 03, 06), `tuning`
(ch. 04), `engineering` (ch. 06), `cases` (ch. 07), `seed_demo` (the article's demo restored)
and `seed_redo` (ch. 08), `misconceptions` (ch. 09), `interview` (ch. 10).
"""
