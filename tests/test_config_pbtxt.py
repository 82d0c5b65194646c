"""batchlab.config_pbtxt: Triton's own schema and parser, field placement, validation, editing."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from batchlab import config_pbtxt as cfg
from batchlab.paths import MODEL_REPOSITORY
from tritonclient.utils import InferenceServerException

COURSE_MODELS = sorted(d.name for d in MODEL_REPOSITORY.iterdir() if (d / "config.pbtxt").is_file())

MISPLACED = """
backend: "python"
input [ { name: "X", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 4 ] } ]
dynamic_batching { max_batch_size: 8 max_queue_delay_microseconds: 100 }
"""


def test_every_course_model_parses_and_has_no_error():
    assert COURSE_MODELS, "the course model repository is empty"
    for name in COURSE_MODELS:
        text = cfg.load_config_text(name)
        msg = cfg.parse_config(text)
        assert msg.name == name
        errors = [f for f in cfg.check_config(text) if f.level == "error"]
        assert errors == [], (name, errors)


def test_summarize_reads_the_batching_fields():
    s = cfg.summarize(cfg.load_config_text("embed"))
    assert (s["scheduler"], s["max_batch_size"], s["delay_us"], s["preferred"]) == ("dynamic", 32, 0, [])
    s = cfg.summarize(cfg.load_config_text("lm_step_oldest"))
    assert s["scheduler"] == "sequence:oldest" and s["delay_us"] == 1000 and s["preferred"] == [8]
    s = cfg.summarize(cfg.load_config_text("lm_stream"))
    assert s["scheduler"] == "none" and s["max_batch_size"] == 0 and s["decoupled"]
    s = cfg.summarize(cfg.load_config_text("embed_queue"))
    assert "max_queue_size=16" in s["queue_policy"]


def test_misplaced_max_batch_size_is_a_parse_error_with_position_and_hint():
    with pytest.raises(cfg.ConfigError) as info:
        cfg.parse_config(MISPLACED)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.line == 5 and err.column > 0
    assert 'no field named "max_batch_size"' in err.message
    assert "顶层" in err.hint
    assert err.kind == "misplaced_field" and err.explanation() == err.hint


@pytest.mark.parametrize("text, kind", [
    ("max_batch_sise: 8", "unknown_field"),
    ("max_batch_size: 8\ndynamic_batching { }\nsequence_batching { direct { } }", "oneof"),
    ("max_batch_size: 8.5", "syntax"),
])
def test_a_config_error_says_its_kind_and_explains_itself_in_chinese(text: str, kind: str):
    with pytest.raises(cfg.ConfigError) as info:
        cfg.parse_config(text)
    assert info.value.kind == kind
    assert re.search("[\u4e00-\u9fff]", info.value.explanation()), info.value.explanation()


def test_both_schedulers_in_one_config_are_refused():
    text = 'max_batch_size: 8\ndynamic_batching { }\nsequence_batching { direct { } }'
    with pytest.raises(cfg.ConfigError, match="oneof"):
        cfg.parse_config(text)
    (finding,) = cfg.check_config(text)
    assert finding.level == "error" and "oldest" in finding.message


def test_max_batch_size_zero_with_dynamic_batching_warns():
    findings = cfg.check_config('backend: "python"\ndynamic_batching { }')
    assert [f.level for f in findings] == ["warning"]
    assert "max(1, max_batch_size) = 1" in findings[0].message


@pytest.mark.parametrize("text, path", [
    ('max_batch_size: 8\ndynamic_batching { preferred_batch_size: [ 4, 16 ] }', "dynamic_batching.preferred_batch_size"),
    ('max_batch_size: 8\ndynamic_batching { preferred_batch_size: [ 0 ] }', "dynamic_batching.preferred_batch_size"),
    ('max_batch_size: 8\ndynamic_batching { priority_levels: 2 default_priority_level: 3 }',
     "dynamic_batching.default_priority_level"),
    ('max_batch_size: 8\ndynamic_batching { priority_levels: 2 default_priority_level: 1 preserve_ordering: true }',
     "dynamic_batching.preserve_ordering"),
    ('max_batch_size: 8\ndynamic_batching { preserve_ordering: true default_queue_policy { '
     'timeout_action: DELAY default_timeout_microseconds: 10 } }', "dynamic_batching.default_queue_policy.timeout_action"),
    ('max_batch_size: 4\nsequence_batching { oldest { preferred_batch_size: [ 8 ] } }',
     "sequence_batching.oldest.preferred_batch_size"),
])
def test_triton_validation_errors(text, path):
    errors = [f for f in cfg.check_config(text) if f.level == "error"]
    assert path in [f.path for f in errors]


def test_timeout_override_without_default_timeout_warns():
    text = 'max_batch_size: 8\ndynamic_batching { default_queue_policy { allow_timeout_override: true } }'
    assert any(f.level == "warning" and f.path.endswith("allow_timeout_override") for f in cfg.check_config(text))


def test_clean_config_has_only_notes():
    text = 'max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 100 }'
    assert {f.level for f in cfg.check_config(text)} == {"note"}


def test_field_paths():
    assert cfg.field_paths("max_batch_size") == ["max_batch_size"]
    assert set(cfg.field_paths("preferred_batch_size")) == {
        "dynamic_batching.preferred_batch_size", "sequence_batching.oldest.preferred_batch_size"}
    assert cfg.field_paths("no_such_field_anywhere") == []
    with pytest.raises(ValueError):
        cfg.field_paths("not a name")


def test_annotate_shows_every_field_at_its_depth():
    text = cfg.annotate(cfg.load_config_text("embed_delay"))
    lines = text.splitlines()
    assert any(re.match(r"^max_batch_size: 32 +# 模型级字段", line) for line in lines)
    assert any(re.match(r"^  max_queue_delay_microseconds: 2000 +# ", line) for line in lines)
    assert any(line.startswith("  preferred_batch_size: [ 8, 16 ]") for line in lines)


def test_edit_config_sets_nested_map_and_enum_fields():
    base = cfg.load_config_text("embed")
    c = cfg.edit_config(base, {
        "name": "embed_prio",
        "dynamic_batching.priority_levels": 2,
        "dynamic_batching.default_priority_level": 1,
        "dynamic_batching.priority_queue_policy": {2: {"default_timeout_microseconds": 200000, "timeout_action": "DELAY"}},
        "parameters": {"blas_threads": 'string_value: "2"'},
    })
    assert c.name == "embed_prio" and c.max_batch_size == 32
    pol = c.dynamic_batching.priority_queue_policy[2]
    assert pol.default_timeout_microseconds == 200000 and pol.timeout_action == 1  # DELAY
    assert c.parameters["blas_threads"].string_value == "2"
    again = cfg.parse_config(cfg.to_text(c))
    assert again == c
    assert cfg.parse_config(base).name == "embed"  # the input is not modified


def test_edit_config_rejects_unknown_paths_and_enum_values():
    base = cfg.load_config_text("embed")
    with pytest.raises(ValueError, match="no field"):
        cfg.edit_config(base, {"dynamic_batching.max_batch_size": 8})
    with pytest.raises(ValueError, match="REJECT"):
        cfg.edit_config(base, {"dynamic_batching.default_queue_policy.timeout_action": "DROP"})


def test_edit_config_merges_a_block_of_text_top_level_nested_and_absent():
    text = 'name: "m"  # a { brace in a comment\nmax_batch_size: 8\ndynamic_batching { }  # old\nparameters { key: "k" value { string_value: "}" } }\n'
    new = cfg.edit_config(text, "dynamic_batching {\n  max_queue_delay_microseconds: 5\n}")
    assert new.dynamic_batching.max_queue_delay_microseconds == 5 and new.parameters["k"].string_value == "}"
    assert new.max_batch_size == 8 and new.name == "m"
    appended = cfg.edit_config('name: "m"\n', "dynamic_batching { }")
    assert appended.HasField("dynamic_batching")
    removed = cfg.edit_config(text, {"dynamic_batching": None})
    assert not removed.HasField("dynamic_batching")
    nested = cfg.edit_config(cfg.load_config_text("lm_step"), "oldest { max_candidate_sequences: 4 }",
                             at="sequence_batching")
    sb = nested.sequence_batching
    assert sb.WhichOneof("strategy_choice") == "oldest" and len(sb.control_input) == 4
    with pytest.raises(ValueError, match="no dynamic_batching"):
        cfg.edit_config('name: "m"\n', "x { }", at="dynamic_batching")


def test_edit_config_block_errors_point_into_the_block():
    base = cfg.load_config_text("embed")  # a long, commented file: positions must not be its own
    with pytest.raises(cfg.ConfigError) as info:
        cfg.edit_config(base, "dynamic_batching {\n  max_batch_size: 8\n}")
    assert (info.value.line, info.value.column) == (2, 3) and "顶层" in info.value.hint
    with pytest.raises(cfg.ConfigError) as info:
        cfg.edit_config(base, "dynamic_batching {\n  max_queue_delay_microseconds: 5\n")
    assert info.value.line == 2 and "闭合" in info.value.hint


def test_stage_model_and_load_errors(tmp_path: Path):
    out = cfg.stage_model(tmp_path, "noop_copy", 'backend: "python"\nmax_batch_size: 4', "noop")
    assert (out / "noop_copy" / "1" / "model.py").is_file()
    assert cfg.load_config_text("noop_copy", repo=tmp_path).startswith('name: "noop_copy"')
    with pytest.raises(ValueError, match="version folder"):
        cfg.stage_model(tmp_path, "x", "", "no_such_model")
    with pytest.raises(ValueError, match="bad model name"):
        cfg.stage_model(tmp_path, "../evil", "", "noop")
    with pytest.raises(ValueError, match="models:"):
        cfg.load_config_text("no_such_model")


@pytest.mark.server
def test_triton_agrees_misplaced_refused_and_zero_batches_one(tmp_path: Path):
    """The real server refuses the misplaced field with the same parser message, and a dynamic
    batcher on a model without max_batch_size runs every request alone."""
    import tritonclient.http as httpclient

    from batchlab.load import read_stats
    from batchlab.server import TritonServer

    cfg.stage_model(tmp_path, "bad_mbs", MISPLACED, "noop")
    zero = cfg.edit_config(cfg.load_config_text("noop"), {"name": "noop_mbs0", "max_batch_size": 0})
    assert [f.level for f in cfg.check_config(zero)] == ["warning"]
    cfg.stage_model(tmp_path, "noop_mbs0", cfg.to_text(zero), "noop")
    with TritonServer(tmp_path, models=["noop_mbs0"]) as server:
        client = server.http_client()
        with pytest.raises(InferenceServerException):
            client.load_model("bad_mbs")
        assert 'has no field named "max_batch_size"' in server.log()
        pool = server.http_client(concurrency=16)
        x = np.ones(4, np.float32)

        def inputs():
            t = httpclient.InferInput("INPUT0", [4], "FP32")
            t.set_data_from_numpy(x)
            return [t]

        before = read_stats(client, "noop_mbs0")
        for r in [pool.async_infer("noop_mbs0", inputs()) for _ in range(64)]:
            np.testing.assert_array_equal(r.get_result().as_numpy("OUTPUT0"), x)
        st = read_stats(client, "noop_mbs0") - before
        assert st.inference_count == st.execution_count == 64
        assert set(st.batch_histogram()) == {1}

