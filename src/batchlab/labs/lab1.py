"""Checks of Lab 1 (第一口锅): config, HTTP and gRPC requests, statistics, metrics, a bad request."""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf.json_format import MessageToDict
from tritonclient.utils import InferenceServerException

from batchlab.config_pbtxt import load_config_text, parse_config
from batchlab.labs._core import Grader, check
from batchlab.load.metrics import MetricsSnapshot
from batchlab.load.transport import infer_inputs
from batchlab.models.requests import random_embed_inputs
from batchlab.load.stats import ModelStats


_MODEL = "embed"


def _is_array(g: Grader, value: Any, what: str) -> np.ndarray:
    if type(value).__name__ == "InferResult":
        g.fail(f"{what}返回的是 InferResult 对象：用 result.as_numpy(\"EMBEDDING\") 取出 numpy 数组再返回")
    if not isinstance(value, np.ndarray):
        g.fail(f"{what}应该返回 numpy 数组，收到的是 {type(value).__name__}")
    return value


#: The course's `embed` config as the server returns it (its JSON form), read from its one home,
#: the model repository's config.pbtxt: the TOKENS length and the EMBEDDING width come from there.
_EMBED = MessageToDict(parse_config(load_config_text("embed")), preserving_proto_field_name=True,
                       always_print_fields_with_no_presence=True)
_LENGTH, _WIDTH = (int(_EMBED[k][0]["dims"][0]) for k in ("input", "output"))
_BATCH = int(_EMBED["max_batch_size"])


def _tokens(n: int, seed: int = 0) -> np.ndarray:
    return random_embed_inputs(n, _LENGTH, seed)["TOKENS"]


#: The model unlike embed the check also tries; each with its expected summary.
_OTHER = {  # a model unlike embed: no batching, two instance groups of 2 and 1, two inputs
    "name": "other", "max_batch_size": 0,
    "input": [{"name": "A", "data_type": "TYPE_FP32", "dims": [3, 4]},
              {"name": "B", "data_type": "TYPE_INT64", "dims": [-1]}],
    "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [3]}],
    "instance_group": [{"name": "other_0", "kind": "KIND_CPU", "count": 2},
                       {"name": "other_1", "kind": "KIND_CPU", "count": 1}],
}
_EXPECTED = {
    "embed": {"max_batch_size": _BATCH, "inputs": {"TOKENS": [_LENGTH]},
              "outputs": {"EMBEDDING": [_WIDTH], "BATCH_SIZE": [1]},
              "dynamic_batching": True, "instances": 1},
    "other": {"max_batch_size": 0, "inputs": {"A": [3, 4], "B": [-1]}, "outputs": {"Y": [3]},
              "dynamic_batching": False, "instances": 3},
}
_SUMMARY_KEYS = ("max_batch_size", "inputs", "outputs", "dynamic_batching", "instances")


def _dims_map(a: Any) -> dict[str, list[int] | None] | None:
    def dims(d: Any) -> list[int] | None:
        try:
            return [int(x) for x in d]
        except (TypeError, ValueError):
            return None
    return {k: dims(v) for k, v in a.items()} if isinstance(a, Mapping) else None


def _summary_problem(key: str, got: Any, want: Any, label: str) -> str:
    """'' when `got` is right for `key`, else the Chinese explanation (naming the usual mistake)."""
    if key == "max_batch_size":
        ok = isinstance(got, (int, np.integer)) and not isinstance(got, bool) and got == want
        return "" if ok else f"{label}：max_batch_size 应为整数 {want!r}，你的是 {got!r}"
    if key in ("inputs", "outputs"):
        mine = _dims_map(got)
        if mine == want:
            return ""
        if mine and all(v and v[0] == -1 and v[1:] == want.get(k) for k, v in mine.items()):
            return f"{label}：{key} 的 dims 不含批维度（-1 是 Triton 加上的批维），应为 {want}"
        return f"{label}：{key} 应为 {want}（名字 → dims），你的是 {got!r}"
    if key == "dynamic_batching":
        if isinstance(got, (bool, np.bool_)) and bool(got) == want:
            return ""
        return (f"{label}：dynamic_batching 应为 {want}（True/False），你的是 {str(got)[:60]}。"
                "开没开动态批处理看配置里有没有 dynamic_batching 这个键，返回布尔值")
    return "" if got == want else (f"{label}：instances 应为 {want}，你的是 {got!r}"
            + ("：要把每组的 count 加起来，不是数有几组" if label.startswith("另一个") and got == 2 else ""))


@check("lab1.q1", points=5, title="读懂模型配置")
def check_config_summary(g: Grader, fn: Callable[..., Any], config: Mapping[str, Any] | None = None) -> None:
    """`fn(config_dict) -> {"max_batch_size", "inputs", "outputs", "dynamic_batching", "instances"}`,
    tried on embed's config (the server's copy when given) and on one unlike it."""
    embed = config if isinstance(config, Mapping) and config.get("name") == "embed" else _EMBED
    results = []
    for label, cfg, want in (("embed", embed, _EXPECTED["embed"]),
                             ("另一个模型（不合批、三个实例）", _OTHER, _EXPECTED["other"])):
        got = g.call(fn, cfg)
        if not isinstance(got, Mapping):
            g.fail(f"summarize_config 应返回一个 dict，收到的是 {type(got).__name__}")
        missing = [k for k in _SUMMARY_KEYS if k not in got]
        if missing:
            g.fail(f"返回的 dict 缺少键：{', '.join(missing)}")
        results.append((label, got, want))

    goods = {"max_batch_size": f"max_batch_size：顶层字段，embed 一次执行最多 {_BATCH} 行",
             "inputs": "inputs：名字 → dims（不含批维）", "outputs": f"outputs：EMBEDDING [{_WIDTH}] 与 BATCH_SIZE [1]",
             "dynamic_batching": "dynamic_batching：看配置里有没有这一节（有就是 True）",
             "instances": "instances：把 instance_group 里每组的 count 加起来"}
    for key in _SUMMARY_KEYS:
        why = next((p for label, got, want in results if (p := _summary_problem(key, got[key], want[key], label))), "")
        g.expect(not why, goods[key], why)


def _reference(client: Any, tokens: np.ndarray, grpc: bool) -> np.ndarray:
    inputs = infer_inputs(grpcclient if grpc else httpclient, {"TOKENS": tokens})
    return client.infer(_MODEL, inputs).as_numpy("EMBEDDING")


def _check_infer(g: Grader, fn: Callable[..., Any], client: Any, tokens: np.ndarray | None, grpc: bool) -> None:
    name = "infer_grpc" if grpc else "infer_http"
    kind = "grpc" if grpc else "http"
    if client is None:
        g.fail(f"检查需要客户端：check_{name}({name}, client=...)")
    if not type(client).__module__.startswith(f"tritonclient.{kind}"):
        g.fail(f"给检查格的 client 应是 tritonclient.{kind} 的客户端，收到的是 {type(client).__module__}")
    tokens = tokens if tokens is not None else _tokens(3)
    out = _is_array(g, g.call(fn, client, tokens), name)
    n = tokens.shape[0]
    if out.shape == (_WIDTH,) and n == 1:
        g.fail(f"返回的形状是 ({_WIDTH},)：请保留批维，返回 (批大小, {_WIDTH})")
    g.expect(out.shape == (n, _WIDTH), f"形状 {out.shape}：每行一个 {_WIDTH} 维向量",
             f"{n} 行输入应得到形状 ({n}, {_WIDTH})，你的是 {out.shape}。输入形状要带批维：[{n}, {_LENGTH}]")
    want = g.observe(lambda: _reference(client, tokens, grpc))
    same = out.shape == want.shape and np.allclose(out, want, atol=1e-5)
    g.expect(same, "数值与服务器的 EMBEDDING 一致", "数值和服务器对同一输入给出的 EMBEDDING 不一致：是不是取错了输出，或改动了输入？")
    one = _is_array(g, g.call(fn, client, _tokens(1, seed=7)), name)
    want_one = g.observe(lambda: _reference(client, _tokens(1, seed=7), grpc))
    g.expect(one.shape == (1, _WIDTH) and np.allclose(one, want_one, atol=1e-5),
             "换一行别的输入也对：函数没有写死", f"换成 1 行别的输入时结果不对（形状 {one.shape}）：函数里别写死输入或形状")


@check("lab1.q2", points=3, title="用 HTTP 发请求")
def check_infer_http(g: Grader, fn: Callable[..., Any], client: Any = None, tokens: np.ndarray | None = None) -> None:
    """`fn(http_client, tokens[n,16] int32) -> EMBEDDING [n,256]`."""
    _check_infer(g, fn, client, tokens, grpc=False)


@check("lab1.q3", points=3, title="用 gRPC 发请求")
def check_infer_grpc(g: Grader, fn: Callable[..., Any], client: Any = None, tokens: np.ndarray | None = None) -> None:
    """`fn(grpc_client, tokens[n,16] int32) -> EMBEDDING [n,256]`."""
    _check_infer(g, fn, client, tokens, grpc=True)


def _stats_json(inference: int, execution: int, batches: Mapping[int, int]) -> dict[str, Any]:
    return {"model_stats": [{
        "name": _MODEL, "version": "1", "inference_count": inference, "execution_count": execution,
        "inference_stats": {"success": {"count": inference, "ns": 1}},
        "batch_stats": [{"batch_size": b, "compute_infer": {"count": c, "ns": 1000 * c}} for b, c in batches.items()],
    }]}


@check("lab1.q4", points=3, title="读统计扩展：平均批大小")
def check_batch_summary(g: Grader, fn: Callable[..., Any], stats: Mapping[str, Any] | None = None) -> None:
    """`fn(stats_json) -> {"inference_count", "execution_count", "mean_batch_size", "histogram"}`."""
    cases = [("一份构造的统计（40 条推理、6 次执行）", _stats_json(40, 6, {8: 4, 4: 2}))]
    if stats is not None:
        cases.insert(0, ("服务器上的统计", stats))
    problems = {"counts": "", "mean": "", "hist": ""}
    for label, js in cases:
        got = g.call(fn, js)
        if not isinstance(got, Mapping):
            g.fail(f"batch_summary 应返回 dict，收到的是 {type(got).__name__}")
        e = js["model_stats"][0]
        inf, exe = int(e["inference_count"]), int(e["execution_count"])
        hist = ModelStats.from_json(js).batch_histogram()
        try:
            counts_ok = int(got.get("inference_count")) == inf and int(got.get("execution_count")) == exe
        except (TypeError, ValueError):
            counts_ok = False
        if not counts_ok and not problems["counts"]:
            problems["counts"] = (f"{label}：inference_count 应为 {inf}，execution_count 应为 {exe}，你的是 "
                                  f"{got.get('inference_count')!r} / {got.get('execution_count')!r}"
                                  "（它们在 stats['model_stats'][0] 里）")
        mean = got.get("mean_batch_size")
        is_num = isinstance(mean, (int, float)) and not isinstance(mean, bool)
        if exe and not (is_num and math.isclose(float(mean), inf / exe, rel_tol=1e-6)) and not problems["mean"]:
            inverted = is_num and inf and math.isclose(float(mean), exe / inf, rel_tol=1e-6)
            problems["mean"] = (f"{label}：mean_batch_size 应为 {inf / exe:.3f}，你的是 {mean!r}。"
                                + ("你算成了 execution_count ÷ inference_count，倒过来了" if inverted else
                                   "平均批大小 = inference_count（批元素数）÷ execution_count（执行次数）"))
        g_hist = got.get("histogram")
        try:
            hist_ok = isinstance(g_hist, Mapping) and {int(k): int(v) for k, v in g_hist.items()} == hist
        except (TypeError, ValueError):
            hist_ok = False
        if not hist_ok and not problems["hist"]:
            problems["hist"] = (f"{label}：histogram 应为 {hist}（batch_stats 里每个 batch_size 的 "
                                f"compute_infer.count），你的是 {g_hist!r}")
    g.expect(not problems["counts"], "inference_count 与 execution_count 读对了", problems["counts"])
    g.expect(not problems["mean"], "平均批大小 = 推理数 ÷ 执行数", problems["mean"])
    g.expect(not problems["hist"], "batch_stats 变成了「批大小 → 执行次数」的直方图", problems["hist"])


_METRICS_TEXT = """# HELP nv_inference_count Number of inferences performed (does not include cached requests)
# TYPE nv_inference_count counter
nv_inference_count{model="embed_nobatch",version="1"} 999
nv_inference_count{model="embed",version="1"} 120
# HELP nv_inference_exec_count Number of model executions performed (does not include cached requests)
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{model="embed_nobatch",version="1"} 999
nv_inference_exec_count{model="embed",version="1"} 15
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="embed",version="1"} 118
"""


@check("lab1.q5", points=3, title="读 Prometheus 指标", shortcuts=(MetricsSnapshot.get, MetricsSnapshot.parse))
def check_metric_value(g: Grader, fn: Callable[..., Any], text: str | None = None) -> None:
    """`fn(metrics_text, name, model) -> float`."""
    got = g.call(fn, _METRICS_TEXT, "nv_inference_count", "embed")
    if isinstance(got, str):
        g.fail(f"返回的是字符串 {got!r}：用 float(...) 转成数")
    if not isinstance(got, (int, float)):
        g.fail(f"metric_value 应返回一个数，收到的是 {type(got).__name__}")
    g.expect(got == 120, "在多模型的指标文本里取对了 model=\"embed\" 的那一行",
             "取到了 embed_nobatch 那一行：标签要整个匹配 model=\"embed\"，不能只看子串 embed" if got == 999 else
             f"nv_inference_count{{model=\"embed\"}} 应为 120，你的是 {got!r}")
    got = g.call(fn, _METRICS_TEXT, "nv_inference_exec_count", "embed")
    g.expect(got == 15, "nv_inference_exec_count 也对：平均批大小 = 120 / 15 = 8",
             f"nv_inference_exec_count{{model=\"embed\"}} 应为 15，你的是 {got!r}（注意 # HELP / # TYPE 注释行要跳过）")
    if text is None:
        g.expect(True, "（没有传入服务器的指标文本，跳过这一项）", "")
        return
    want = MetricsSnapshot.parse(text).get("nv_inference_count", model=_MODEL)
    got = g.call(fn, text, "nv_inference_count", _MODEL)
    g.expect(isinstance(got, (int, float)) and got == want, f"服务器的真实指标：nv_inference_count = {want:.0f}",
             f"服务器的指标文本里 nv_inference_count{{model=\"embed\"}} 是 {want:.0f}，你的函数给出 {got!r}")


@check("lab1.q6", points=3, title="发一个错误的请求，读懂错误")
def check_bad_request(g: Grader, fn: Callable[..., Any], client: Any = None) -> None:
    """`fn(client)` sends TOKENS of shape [1, 17] and returns the InferenceServerException it caught."""
    if client is None:
        g.fail("检查需要客户端：check_bad_request(send_bad_request, client=...)")
    got, raised = g.call_raw(fn, client)
    if raised is not None and isinstance(raised.exception, InferenceServerException):
        g.fail(f"异常没有被接住就抛出来了（{raised.message[:60]}…）：用 try / except InferenceServerException as e: return e")
    if raised is not None:
        g.fail(f"调用 send_bad_request 时抛出了 {raised.short()}")
    if got is None:
        g.fail("函数返回了 None：请求是不是成功了？要发一个形状为 [1, 17] 的 TOKENS，接住异常并 return 它")
    if not g.expect(isinstance(got, InferenceServerException), "返回了服务器的 InferenceServerException",
                    f"应返回接住的 InferenceServerException，收到的是 {type(got).__name__}"):
        return
    msg = got.message() or ""
    g.expect("unexpected shape" in msg and "17" in msg, "错误是形状不对：Expected [-1,16], got [1,17]",
             f"这不是我们要的形状错误（服务器说：{msg[:120]}）。请发 17 个 token 的一行：np.zeros((1, 17), np.int32)")
    status = str(got.status())
    g.expect(status in ("400", "StatusCode.INVALID_ARGUMENT"),
             f"状态码 {status}：客户端的错（HTTP 400 / gRPC INVALID_ARGUMENT），不是服务器坏了",
             f"状态码应是 400（HTTP）或 StatusCode.INVALID_ARGUMENT（gRPC），你的是 {status}")
