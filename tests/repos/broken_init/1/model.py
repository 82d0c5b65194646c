"""A model whose initialize raises: the launcher must name it."""


class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("weights file missing: lab_weights.npy")

    def execute(self, requests):
        return []
