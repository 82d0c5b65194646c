"""`python -m batchlab.bench`: bad usage is one line on stderr and exit status 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from batchlab.bench.__main__ import main


@pytest.mark.parametrize("argv, message", [
    ([], "name a benchmark"),
    (["nope"], "invalid choice"),
    (["dynamic", "--rounds", "0"], "--rounds must be >= 1"),
    (["continuous", "--requests", "0"], "--requests must be >= 1"),
    (["client", "--lab-max-rate", "-5"], "--lab-max-rate must be > 0"),
    (["fidelity", "--level-s", "soon"], "invalid float value"),
])
def test_bad_usage_is_one_line_and_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err


def test_missing_model_on_an_external_server_is_named(echo_repo, monkeypatch) -> None:
    from batchlab.server import TritonServer

    with TritonServer(echo_repo) as server:
        env = {"TRITON_URL": server.http_url, "TRITON_GRPC_URL": server.grpc_url,
               "TRITON_METRICS_URL": server.metrics_url, "BATCHLAB_TRITON_KEY": server.key or ""}
        cli = subprocess.run([sys.executable, "-m", "batchlab.bench", "client"], capture_output=True, text=True,
                             timeout=120, env={**__import__("os").environ, **env})
    assert cli.returncode == 2 and cli.stdout == ""
    assert cli.stderr.strip().startswith("error: the server at TRITON_URL does not serve noop (it has echo")


@pytest.mark.parametrize("argv, message", [
    (["continuous", "--rounds", "0"], "--rounds must be >= 1"),
    (["continuous", "--scale", "0"], "--scale must be > 0"),
    (["continuous", "--scale", "3.5"], "--scale must be >= 3.91"),
    (["continuous", "--concurrency", "-1"], "--concurrency must be >= 1"),
    (["continuous", "--lm", "huge"], "invalid choice: 'huge'"),
])
def test_continuous_bad_flags_fail_before_any_server(argv: list[str], message: str, capsys) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and message in err


def test_chat_lengths_keep_the_trace_shape() -> None:
    from batchlab.bench.continuous import CHAT_TRACE, chat_lengths, length_summary

    d = chat_lengths(8.0)
    assert d.median == pytest.approx(129 / 8) and d.cap == 125
    assert np.exp(1.2815515655446004 * d.sigma) == pytest.approx(CHAT_TRACE["p90"] / CHAT_TRACE["median"])
    x = d.sample(200_000, 0)
    s = length_summary(x)
    assert s["max"] <= 125 and x.min() >= 1
    assert s["mean"] == pytest.approx(d.mean, rel=0.01)  # the exact mean matches the draws
    assert s["median"] == pytest.approx(16, abs=1)
    assert s["p90"] / s["median"] == pytest.approx(424 / 129, rel=0.1)
    assert chat_lengths(4.0).median == pytest.approx(2 * d.median)


def test_wide_lm_copies_keep_every_other_setting(tmp_path) -> None:
    from batchlab.bench.continuous import decode_width, lm_description, run, stage_width
    from batchlab.config_pbtxt import load_config_text, parse_config

    width = decode_width()
    assert width == {"d_model": 512, "d_ff": 2048}  # read from the decode model's config.pbtxt
    stage_width(tmp_path, ("generate", "lm_stream"), width)
    for m in ("generate", "lm_stream"):
        own, staged = (parse_config(load_config_text(m, repo)) for repo in (None, tmp_path))
        assert {k: v.string_value for k, v in staged.parameters.items()} == {
            **{k: v.string_value for k, v in own.parameters.items()}, "d_model": "512", "d_ff": "2048"}
        del staged.parameters["d_model"], staged.parameters["d_ff"]
        assert staged == own
        assert (tmp_path / m / "1" / "model.py").is_file()
    wide, default = lm_description("decode", False), lm_description("default", False)
    assert wide["weights_mb"] > 3.5 * default["weights_mb"] and default["d_model"] == 256
    assert lm_description("decode", True)["width"] == "as served at TRITON_URL"
    with pytest.raises(ValueError, match="--lm must be one of decode, default"):
        run(lm="wide")


def test_capped_lognormal_mean_and_validation() -> None:
    from batchlab.sim.lengths import capped_lognormal

    d = capped_lognormal(3.0, 0.5, cap=4, lo=2)
    assert d.mean == pytest.approx(d.sample(300_000, 1).mean(), rel=0.005)
    assert capped_lognormal(10, 1.0, cap=1).mean == 1.0
    with pytest.raises(ValueError, match="cap must be >= lo"):
        capped_lognormal(10, 1.0, cap=2, lo=3)
    with pytest.raises(ValueError, match="sigma"):
        capped_lognormal(10, 0.0, cap=20)


def _round(tps: dict[str, float], eta: float, same: bool = True) -> dict:
    res = {m: {"tokens_per_s": v, "eta": eta if m == "generate" else 1.0, "errors": 0,
               "decode_step": {"ms_per_step": 4.0, "rows_per_step": 4.0, "ms_per_row": 1.0}} for m, v in tps.items()}
    return {"results": res, "same_tokens_as_generate": {m: same for m in tps}}


def test_summary_is_the_median_of_paired_round_ratios() -> None:
    from batchlab.bench.continuous import round_summary

    models = ("generate", "lm_iterative", "lm_stream")
    rounds = [_round({"generate": 100, "lm_iterative": 150, "lm_stream": 210}, 0.4),   # 2.1 (lm_stream)
              _round({"generate": 100, "lm_iterative": 300, "lm_stream": 250}, 0.5),   # 3.0 (lm_iterative)
              _round({"generate": 200, "lm_iterative": 250, "lm_stream": 300}, 0.25)]  # 1.5
    s = round_summary(rounds, models)
    assert s["speedup_vs_static"] == 2.1
    assert s["speedup_vs_static_spread"] == {"min": 1.5, "max": 3.0, "all": [2.1, 3.0, 1.5]}
    assert s["best_continuous_per_round"] == ["lm_stream", "lm_iterative", "lm_stream"]
    assert s["padding_bound_speedup"]["all"] == [2.5, 2.0, 4.0] and s["padding_bound_speedup"]["median"] == 2.5
    assert s["speedup_over_padding_bound"]["all"] == [0.84, 1.5, 0.375]
    assert rounds[1]["speedup_vs_static"] == 3.0 and rounds[2]["padding_bound_speedup"] == 4.0
    assert s["per_model"]["generate"]["tokens_per_s"]["median"] == 100
    assert s["row_cost_ratio"]["all"] == [1.0, 1.0, 1.0] and rounds[0]["speedup_from_eta_and_row_cost"] == 2.5
    assert s["same_tokens_as_generate"] == {m: True for m in models} and s["errors"] == 0
    rounds[0]["same_tokens_as_generate"]["lm_stream"] = False
    assert round_summary(rounds, models)["same_tokens_as_generate"]["lm_stream"] is False
