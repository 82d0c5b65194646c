"""batchlab.course: the chapters' experiments, one module per chapter topic.

Each module puts the engines (`sim`, `load`, `probe`) and `theory` together into the experiment a
chapter runs, and returns rows or results for the notebook to print and `plotting` to draw.

* `presets` — service models shared by several chapters (`EMBED_LIKE`, `LLM_COST`);
* `capacity` — toy-LM KV accounting, cost per request, KV admission on the server (chapters 03, 06);
* `tuning` — dynamic-batcher settings swept and searched under an SLO (chapter 04);
* `engineering` — starvation, delay bounds, online/offline mixes, live metrics (chapter 06);
* `cases` — the e-commerce and SaaS case studies (chapter 07);
* `seed_demo` — the article's Python demo restored exactly, with its verified `DEFECTS`, and
  `seed_redo` — the same workload on the real schedulers (chapter 08);
* `misconceptions` — the experiments that refute the five misconceptions (chapter 09);
* `interview` — the evidence behind each interview answer (chapter 10).
"""
