"""batchlab.course: the chapters' experiments (one module per chapter), built from `sim`, `load`,
`probe` and `theory`; they return rows for the notebooks to print and `plotting` to draw.
"""
