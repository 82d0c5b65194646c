"""The course model repository's config.pbtxt files: valid for Triton, commented in Chinese."""

from __future__ import annotations

import re

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from batchlab.paths import MODEL_REPOSITORY

MODELS = sorted(p.parent.name for p in MODEL_REPOSITORY.glob("*/config.pbtxt"))
CJK = re.compile(r"[\u4e00-\u9fff]")


def load(model: str) -> tuple[str, mc.ModelConfig]:
    text = (MODEL_REPOSITORY / model / "config.pbtxt").read_text(encoding="utf-8")
    return text, text_format.Parse(text, mc.ModelConfig())


def test_the_repository_holds_one_model_per_mechanism():
    assert set(MODELS) >= {"noop", "embed", "embed_nobatch", "embed_delay", "embed_2inst",
                           "embed_queue", "generate", "lm_step", "lm_step_oldest",
                           "lm_iterative", "lm_stream"}


@pytest.mark.parametrize("model", MODELS)
def test_config_parses_with_tritons_schema_and_names_its_directory(model):
    _, cfg = load(model)
    assert cfg.name == model
    assert cfg.backend == "python"
    assert (MODEL_REPOSITORY / model / "1" / "model.py").is_file()


@pytest.mark.parametrize("model", MODELS)
def test_every_field_line_carries_a_chinese_comment(model):
    text, _ = load(model)
    for n, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0].strip()
        if not code or re.fullmatch(r"[{}\[\],\s]+", code):
            continue
        comment = line.split("#", 1)[1] if "#" in line else ""
        assert CJK.search(comment), f"{model}/config.pbtxt line {n} has no Chinese comment: {line}"
    mbs = [ln for ln in text.splitlines() if ln.strip().startswith("max_batch_size")]
    assert len(mbs) == 1 and "模型级" in mbs[0]


def test_batching_mechanisms_are_configured_as_the_course_says():
    cfg = {m: load(m)[1] for m in MODELS}
    assert cfg["embed"].HasField("dynamic_batching") and cfg["embed"].max_batch_size == 32
    assert not cfg["embed_nobatch"].HasField("dynamic_batching")
    assert list(cfg["embed_delay"].dynamic_batching.preferred_batch_size) == [8, 16]
    assert cfg["embed_delay"].dynamic_batching.max_queue_delay_microseconds > 0
    assert cfg["embed_2inst"].instance_group[0].count == 2
    assert cfg["embed_queue"].dynamic_batching.default_queue_policy.max_queue_size > 0
    assert cfg["lm_step"].sequence_batching.HasField("direct")
    assert cfg["lm_step_oldest"].sequence_batching.HasField("oldest")
    kinds = {c.name: c.control[0].kind for c in cfg["lm_step"].sequence_batching.control_input}
    assert kinds == {"START": mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_START,
                     "END": mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_END,
                     "READY": mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_READY,
                     "CORRID": mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_CORRID}
    it = cfg["lm_iterative"]
    assert it.sequence_batching.iterative_sequence and it.model_transaction_policy.decoupled
    st = cfg["lm_stream"]
    assert st.max_batch_size == 0 and st.model_transaction_policy.decoupled
    assert {"max_active", "kv_token_budget"} <= set(st.parameters)
