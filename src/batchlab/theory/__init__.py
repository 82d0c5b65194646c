"""batchlab.theory: the course's formulas as pure functions of numbers (`formulas`, `queueing`,
`padding`, `kv`, `roofline`); it imports only `batchlab._validate`.
"""
