"""Lab 1 checks against the real server: right answers score full, wrong ones get Chinese reasons."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from batchlab.labs.lab1 import (_METRICS_TEXT, check_bad_request, check_batch_summary, check_config_summary,
                                  check_infer_grpc, check_infer_http, check_metric_value)

pytestmark = pytest.mark.server


def summarize_config(cfg):
    return {"max_batch_size": cfg["max_batch_size"],
            "inputs": {t["name"]: list(t["dims"]) for t in cfg["input"]},
            "outputs": {t["name"]: list(t["dims"]) for t in cfg["output"]},
            "dynamic_batching": "dynamic_batching" in cfg,
            "instances": sum(g.get("count", 1) for g in cfg.get("instance_group", []))}


def infer_http(client, tokens):
    inp = httpclient.InferInput("TOKENS", list(tokens.shape), "INT32")
    inp.set_data_from_numpy(tokens)
    return client.infer("embed", [inp]).as_numpy("EMBEDDING")


def infer_grpc(client, tokens):
    inp = grpcclient.InferInput("TOKENS", list(tokens.shape), "INT32")
    inp.set_data_from_numpy(tokens)
    return client.infer("embed", [inp]).as_numpy("EMBEDDING")


def batch_summary(stats):
    e = stats["model_stats"][0]
    inf, exe = int(e["inference_count"]), int(e["execution_count"])
    return {"inference_count": inf, "execution_count": exe, "mean_batch_size": inf / exe,
            "histogram": {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in e["batch_stats"]}}


def metric_value(text, name, model):
    for line in text.splitlines():
        if line.startswith(name + "{") and f'model="{model}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return float("nan")


def send_bad_request(client):
    bad = np.zeros((1, 17), np.int32)
    inp = httpclient.InferInput("TOKENS", [1, 17], "INT32")
    inp.set_data_from_numpy(bad)
    try:
        client.infer("embed", [inp])
    except InferenceServerException as e:
        return e


@pytest.fixture(scope="module")
def clients(triton):
    return triton.http_client(), triton.grpc_client()


def test_config_summary(clients, capsys) -> None:
    http, _ = clients
    cfg = http.get_model_config("embed")
    assert check_config_summary(summarize_config, config=cfg).passed
    capsys.readouterr()
    wrong = lambda c: {**summarize_config(c), "dynamic_batching": bool(c.get("dynamic_batching", {}).get("max_queue_delay_microseconds"))}
    r = check_config_summary(wrong, config=cfg)
    assert r.score == 4 and "dynamic_batching" in capsys.readouterr().out
    hard = lambda c: summarize_config(cfg)  # ignores its argument
    r = check_config_summary(hard, config=cfg)
    out = capsys.readouterr().out
    assert not r.passed and "另一个模型" in out


def test_infer_http_and_grpc(clients, capsys) -> None:
    http, grpc = clients
    tokens = np.zeros((3, 16), np.int32)
    tokens[:, 0] = 1
    tokens[:, 1] = [10, 20, 30]
    assert check_infer_http(infer_http, client=http, tokens=tokens).passed
    assert check_infer_grpc(infer_grpc, client=grpc, tokens=tokens).passed
    capsys.readouterr()
    r = check_infer_http(lambda c, t: c.infer("embed", [_inp(t)]), client=http, tokens=tokens)
    assert r.score == 0 and "InferResult" in capsys.readouterr().out
    r = check_infer_http(lambda c, t: infer_http(c, t)[0], client=http, tokens=tokens)
    assert not r.passed and "(3, 256)" in capsys.readouterr().out
    r = check_infer_grpc(infer_http, client=grpc, tokens=tokens)  # wrong client kind for its module
    assert r.score == 0 and "调用 infer_http" in capsys.readouterr().out


def _inp(t):
    inp = httpclient.InferInput("TOKENS", list(t.shape), "INT32")
    inp.set_data_from_numpy(t)
    return inp


def test_batch_summary(clients, capsys) -> None:
    http, _ = clients
    stats = http.get_inference_statistics("embed")
    assert check_batch_summary(batch_summary, stats=stats).passed
    capsys.readouterr()
    inverted = lambda s: {**batch_summary(s), "mean_batch_size": batch_summary(s)["execution_count"] / batch_summary(s)["inference_count"]}
    r = check_batch_summary(inverted, stats=stats)
    assert r.score == 2 and "倒过来了" in capsys.readouterr().out


def test_metric_value(triton, capsys) -> None:
    import urllib.request
    with urllib.request.urlopen(f"http://{triton.metrics_url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    assert check_metric_value(metric_value, text=text).passed
    capsys.readouterr()

    def substring(text, name, model):
        for line in text.splitlines():
            if line.startswith(name) and model in line:
                return float(line.rsplit(" ", 1)[1])
    r = check_metric_value(substring, text=_METRICS_TEXT)
    assert not r.passed and "embed_nobatch" in capsys.readouterr().out
    r = check_metric_value(lambda t, n, m: "120")
    assert r.score == 0 and "float" in capsys.readouterr().out


def test_bad_request(clients, capsys) -> None:
    http, grpc = clients
    assert check_bad_request(send_bad_request, client=http).passed
    capsys.readouterr()

    def uncaught(client):
        inp = httpclient.InferInput("TOKENS", [1, 17], "INT32")
        inp.set_data_from_numpy(np.zeros((1, 17), np.int32))
        client.infer("embed", [inp])
    r = check_bad_request(uncaught, client=http)
    assert r.score == 0 and "except InferenceServerException" in capsys.readouterr().out
    r = check_bad_request(lambda c: None, client=http)
    assert r.score == 0 and "None" in capsys.readouterr().out
