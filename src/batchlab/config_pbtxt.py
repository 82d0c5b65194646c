"""Read, check, annotate and edit a model's `config.pbtxt` with Triton's own schema and parser
(`inference.ModelConfig` from `tritonclient.grpc.model_config_pb2`); errors come with a Chinese hint.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from google.protobuf import text_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from tritonclient.grpc import model_config_pb2 as mc

from batchlab.paths import MODEL_REPOSITORY

SRC_PROTO = "common protobuf/model_config.proto"
SRC_BATCHER = "server docs/user_guide/batcher.md"
SRC_VALIDATE = "core src/model_config_utils.cc (ValidateModelConfig)"
SRC_SCHED = "core src/dynamic_batch_scheduler.cc"
SRC_UTILS = "core src/scheduler_utils.cc"

#: Chinese notes on the fields the course uses, keyed by dotted path in `ModelConfig`.
FIELD_NOTES: dict[str, str] = {
    "name": "模型名，须与模型目录同名",
    "backend": "由哪个后端执行（本课程全是 python 后端）",
    "platform": "TensorRT/ONNX 等平台名，与 backend 二选一",
    "max_batch_size": "模型级字段：一次执行最多几个批元素；0 表示模型不批处理（输入没有批维度）",
    "input": "输入张量；dims 不含批维度（max_batch_size > 0 时 Triton 自动加上）",
    "input.name": "张量名",
    "input.data_type": "元素类型",
    "input.dims": "每个批元素的形状；-1 表示可变长",
    "input.allow_ragged_batch": "允许不同形状的请求拼进同一批（默认 false：形状不同就切批）",
    "input.optional": "可选输入",
    "output": "输出张量",
    "output.name": "张量名",
    "output.data_type": "元素类型",
    "output.dims": "每个批元素的形状",
    "instance_group": "开几个模型实例（几口灶）、放在哪里",
    "instance_group.count": "实例数：可同时执行的批数",
    "instance_group.kind": "KIND_CPU / KIND_GPU",
    "dynamic_batching": "动态批处理器（拼锅主管）；与 sequence_batching 互斥（同一个 oneof）",
    "dynamic_batching.max_queue_delay_microseconds":
        "凑不成最大/偏好批时，最老的请求最多被「扣下」多久；默认 0 = 不等。只管拼锅等待，不管实例忙时的排队",
    "dynamic_batching.preferred_batch_size":
        "偏好批大小；batcher.md 建议多数模型不要设（留空即视为 [max_batch_size]）",
    "dynamic_batching.preserve_ordering": "按请求到达顺序返回响应；不能与多优先级或 DELAY 同用",
    "dynamic_batching.priority_levels": "优先级档数；1 为最高，同档内先来先服务",
    "dynamic_batching.default_priority_level": "不带优先级的请求归入哪一档（须在 1..priority_levels）",
    "dynamic_batching.default_queue_policy": "队列策略：队列上限与排队超时（真正给排队时间设上限的地方）",
    "dynamic_batching.default_queue_policy.max_queue_size": "队列最多容纳几个请求；0 = 不限，满了直接拒绝",
    "dynamic_batching.default_queue_policy.default_timeout_microseconds":
        "请求在队列里最多待多久；0 = 永不超时",
    "dynamic_batching.default_queue_policy.timeout_action":
        "超时后 REJECT（返回 UNAVAILABLE）或 DELAY（挪到未超时请求之后，可能被无限推迟）",
    "dynamic_batching.default_queue_policy.allow_timeout_override":
        "允许单个请求带更短的超时（只能缩短，默认超时为 0 时无效）",
    "dynamic_batching.priority_queue_policy": "按优先级档分别设置的队列策略",
    "sequence_batching": "序列批处理器：同一序列（correlation ID）的请求送往同一实例；与 dynamic_batching 互斥",
    "sequence_batching.max_sequence_idle_microseconds": "序列空闲多久被回收（默认 1 s），模型收不到 END",
    "sequence_batching.direct": "direct 策略：每条活跃序列独占一个批槽位",
    "sequence_batching.oldest": "oldest 策略：在候选序列里挑最老的请求合批——序列批处理器里内置的动态批处理",
    "sequence_batching.oldest.max_candidate_sequences": "同时参与合批的候选序列数",
    "sequence_batching.oldest.preferred_batch_size": "同 dynamic_batching 的偏好批大小",
    "sequence_batching.oldest.max_queue_delay_microseconds": "同 dynamic_batching 的最大拼锅等待",
    "sequence_batching.iterative_sequence": "迭代式序列：每步一次执行，后端用 RESCHEDULE 把未完成的请求放回（Triton 文档里的 continuous/inflight batching）",
    "sequence_batching.control_input": "START/END/READY/CORRID 等控制张量",
    "sequence_batching.state": "隐式状态（只有 onnxruntime、TensorRT、PyTorch 后端支持）",
    "model_transaction_policy": "事务策略",
    "model_transaction_policy.decoupled": "解耦模式：一个请求可返回 0..n 个响应（流式输出），需 gRPC 流",
    "parameters": "传给模型的自定义参数",
    "version_policy": "加载哪些版本（默认最新 1 个）",
}


class ConfigError(ValueError):
    """A config Triton would refuse: `line`/`column` (1-based, 0 if unknown), the protobuf text-format
    parser's `message`, its `kind` ("unknown_field", "misplaced_field", "oneof", "unclosed", or "syntax")
    and a Chinese `hint`, both worked out from the message here."""

    def __init__(self, message: str, line: int = 0, column: int = 0) -> None:
        self.message = message.strip().rstrip(".")
        self.line = line
        self.column = column
        self.kind, self.hint = _hint(self.message)
        where = f"line {line}, column {column}: " if line else ""
        super().__init__(f"{where}{self.message}" + (f" — {self.hint}" if self.hint else ""))

    def explanation(self) -> str:
        """The course's one Chinese explanation of this error (no position): what is wrong and what to do."""
        if self.kind in ("unknown_field", "misplaced_field"):
            return self.hint
        return "。".join(x for x in (translate_error(self.message), self.hint) if x)


@dataclass(frozen=True)
class Finding:
    """One result of `check_config`: `level` "error" (Triton refuses the model), "warning" (it loads
    but misleads) or "note"; `message` in Chinese; `source` where the behaviour is defined."""

    level: str
    path: str
    message: str
    source: str

    def __str__(self) -> str:
        return f"[{self.level}] {self.path}: {self.message}  ({self.source})"


def _walk(desc: Descriptor, prefix: str, depth: int, seen: tuple[str, ...]) -> Iterator[tuple[str, FieldDescriptor]]:
    for f in desc.fields:
        path = f"{prefix}.{f.name}" if prefix else f.name
        yield path, f
        if f.type == FieldDescriptor.TYPE_MESSAGE and depth < 4:
            sub = f.message_type
            if sub.GetOptions().map_entry:
                sub = sub.fields_by_name["value"].message_type
                if sub is None:
                    continue
            if sub.full_name in seen:
                continue
            yield from _walk(sub, path, depth + 1, seen + (sub.full_name,))


def field_paths(name: str) -> list[str]:
    """Every dotted path in `ModelConfig` (up to 5 levels deep) whose last part is `name`."""
    if not name or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"not a field name: {name!r}")
    return [p for p, f in _walk(mc.ModelConfig.DESCRIPTOR, "", 0, ()) if f.name == name]


_POS = re.compile(r"^(\d+):(\d+) : (.*)$", re.S)
_NO_FIELD = re.compile(r'Message type "inference\.(\w+)" has no field named "(\w+)"')
_EXPECTED_CLOSE = re.compile(r'^Expected "([}\]])"$')
_ONEOF = re.compile(r'Field "(\w+)" is specified along with field "(\w+)", another member of oneof')

_MSG_PATH = {"ModelConfig": "", "ModelDynamicBatching": "dynamic_batching",
             "ModelSequenceBatching": "sequence_batching", "ModelQueuePolicy": "…queue_policy",
             "ModelInstanceGroup": "instance_group", "ModelInput": "input", "ModelOutput": "output"}


def _hint(message: str) -> tuple[str, str]:
    """(kind, Chinese hint) of a parser message; ("syntax", "") when there is nothing to add."""
    m = _NO_FIELD.search(message)
    if m:
        msg_type, fieldname = m.groups()
        here = _MSG_PATH.get(msg_type, msg_type)
        try:
            homes = field_paths(fieldname)
        except ValueError:
            homes = []
        where = f"`{here}` 里" if here else "顶层"
        if not homes:
            return "unknown_field", f"`{fieldname}` 不是 ModelConfig 的字段（拼写？），Triton 拒绝加载该模型"
        shown = "、".join("顶层（模型级）" if "." not in h else f"`{h}`" for h in homes[:4])
        return "misplaced_field", (f"{where}没有 `{fieldname}` 这个字段；它应写在 {shown}。"
                                   "Triton 按 model_config.proto 解析，放错位置的字段是解析错误，模型加载失败")
    m = _ONEOF.search(message)
    if m:
        a, b = m.groups()
        return "oneof", (f"`{a}` 与 `{b}` 同属 oneof scheduling_choice：一个模型只能有一种调度器。"
                         "想在序列上合批，用 sequence_batching 的 oldest 策略（它内置动态批处理）")
    m = _EXPECTED_CLOSE.search(message)
    if m:
        return "unclosed", f"有一节没有用 `{m.group(1)}` 闭合：每个 `{{` 要有配对的 `}}`，每个 `[` 要有配对的 `]`"
    return "syntax", ""


_TRANSLATIONS = [
    (re.compile(r'^Expected identifier(?: or number)?, got:? (.*)$'), "这里应当是一个字段名，读到的却是 `{0}`"),
    (re.compile(r'^Expected identifier\.?$'), "这里应当是一个字段名"),
    (re.compile(r'^Expected ":"(?:, found "(.*)")?$'), "字段名后面应当是冒号 `:`（写成 `字段: 值`）"),
    (re.compile(r'^Expected integer(?:, got:? (.*))?$'), "这里应当是一个整数"),
    (re.compile(r"^Couldn't parse integer: (.*)$"), "`{0}` 不是整数（微秒、个数都写成不带小数点的整数）"),
    (re.compile(r'^Expected "([}\]])"(?:, found "(.*)")?$'), "这里应当是 `{0}`"),
    (re.compile(r'^Expected ","(?:, found "(.*)")?$'), "列表里的元素之间要用逗号隔开，写成 `[ 8, 16 ]`"),
    (re.compile(r'^Enum type "[\w.]+" has no value named (\w+)(?: for field (\w+))?$'),
     "没有 `{0}` 这个取值（枚举值要大写，拼写要和 model_config.proto 一致，例如 REJECT）"),
    (re.compile(r'^Non-repeated field "(\w+)" is specified multiple times$'), "`{0}` 只能写一次"),
]
_QUOTED = re.compile(r"^'.*?': ")


def translate_error(message: str) -> str:
    """The parser's `message` said in Chinese: what Triton expected there."""
    message = _QUOTED.sub("", message.strip())
    for pattern, text in _TRANSLATIONS:
        m = pattern.match(message)
        if m:
            return text.format(*m.groups())
    return f"Triton 的解析器报告：{message}"


def _parse_into(text: str, msg: Any) -> Any:
    """Parse config text into `msg` (a `ModelConfig` or a sub-message) as Triton does, or raise `ConfigError`."""
    try:
        text_format.Parse(text, msg)
    except text_format.ParseError as exc:
        raw = str(exc)
        m = _POS.match(raw)
        line, col, body = (int(m.group(1)), int(m.group(2)), m.group(3)) if m else (0, 0, raw)
        raise ConfigError(body, line, col) from None
    return msg


def parse_config(text: str) -> Any:
    """Parse config.pbtxt text into `inference.ModelConfig` as Triton does, or raise `ConfigError`."""
    if not isinstance(text, str):
        raise ValueError("config text must be a str")
    return _parse_into(text, mc.ModelConfig())


def load_config_text(model: str | Path, repo: str | Path | None = None) -> str:
    """The text of `<repo>/<model>/config.pbtxt` (default repo: the course's)."""
    base = Path(repo) if repo is not None else MODEL_REPOSITORY
    f = base / str(model) / "config.pbtxt"
    if not f.is_file():
        have = sorted(d.name for d in base.iterdir() if (d / "config.pbtxt").is_file()) if base.is_dir() else []
        raise ValueError(f"no config.pbtxt for model {str(model)!r} in {base} (models: {', '.join(have) or 'none'})")
    return f.read_text(encoding="utf-8")


def _as_config(config: Any) -> Any:
    return parse_config(config) if isinstance(config, str) else config


def check_config(config: Any) -> list[Finding]:
    """Errors Triton raises for `config` (text or `ModelConfig`) and warnings for settings that
    mislead; a parse error is a single error finding."""
    try:
        c = _as_config(config)
    except ConfigError as exc:
        m = _NO_FIELD.search(exc.message)
        path = f"{_MSG_PATH.get(m.group(1), m.group(1))}.{m.group(2)}".lstrip(".") if m else ""
        return [Finding("error", path or "(parse)", f"第 {exc.line} 行第 {exc.column} 列：{exc.message}。{exc.hint}",
                        SRC_PROTO)]
    out: list[Finding] = []
    mbs = c.max_batch_size
    if mbs < 0:
        out.append(Finding("error", "max_batch_size", "必须 ≥ 0", SRC_VALIDATE))
    sched = c.WhichOneof("scheduling_choice")
    if sched == "dynamic_batching":
        out.extend(_check_dynamic(c.dynamic_batching, mbs))
    elif sched == "sequence_batching":
        sb = c.sequence_batching
        if sb.HasField("oldest"):
            for size in sb.oldest.preferred_batch_size:
                if size <= 0 or size > mbs:
                    out.append(Finding("error", "sequence_batching.oldest.preferred_batch_size",
                                       f"偏好批大小 {size} 必须在 1..max_batch_size（{mbs}）之间", SRC_VALIDATE))
        if sb.iterative_sequence and not c.model_transaction_policy.decoupled:
            out.append(Finding("note", "sequence_batching.iterative_sequence",
                               "迭代式序列通常配合 decoupled 模型逐 token 流式返回", SRC_BATCHER))
    elif mbs > 0:
        out.append(Finding("note", "max_batch_size",
                           f"max_batch_size: {mbs} 但没有调度器配置：默认调度器不合批，每次执行只含一个请求"
                           "（客户端自己发来的批除外）", SRC_SCHED))
    return out


def _check_dynamic(db: Any, mbs: int) -> list[Finding]:
    out: list[Finding] = []
    if mbs == 0:
        out.append(Finding(
            "warning", "max_batch_size",
            "dynamic_batching 已开启但 max_batch_size 为 0（或漏写）：模型照常加载，调度器按 "
            "max(1, max_batch_size) = 1 合批——每批只有 1 个请求，等于没有批处理", SRC_SCHED))
    for size in db.preferred_batch_size:
        if size <= 0:
            out.append(Finding("error", "dynamic_batching.preferred_batch_size",
                               f"偏好批大小 {size} 必须为正", SRC_VALIDATE))
        elif size > mbs:
            out.append(Finding("error", "dynamic_batching.preferred_batch_size",
                               f"偏好批大小 {size} 不能超过 max_batch_size（{mbs}）", SRC_VALIDATE))
    if list(db.preferred_batch_size):
        out.append(Finding("note", "dynamic_batching.preferred_batch_size",
                           "batcher.md 建议多数模型不设偏好批大小（带多个优化 profile 的 TensorRT 模型除外）；"
                           "凑得出的最大偏好批在延时到期前会被立刻发出", SRC_BATCHER))
    levels = db.priority_levels
    if levels:
        if db.default_priority_level == 0 or db.default_priority_level > levels:
            out.append(Finding("error", "dynamic_batching.default_priority_level",
                               f"须在 [1, {levels}] 之内（现为 {db.default_priority_level}）", SRC_VALIDATE))
        for lvl in db.priority_queue_policy:
            if lvl == 0 or lvl > levels:
                out.append(Finding("error", "dynamic_batching.priority_queue_policy",
                                   f"优先级 {lvl} 不在 [1, {levels}] 之内", SRC_VALIDATE))
    elif list(db.priority_queue_policy):
        out.append(Finding("warning", "dynamic_batching.priority_queue_policy",
                           "没有设 priority_levels 时按优先级的队列策略不起作用", SRC_BATCHER))
    policies = [(f"dynamic_batching.priority_queue_policy[{k}]", v) for k, v in sorted(db.priority_queue_policy.items())]
    if db.HasField("default_queue_policy"):
        policies.insert(0, ("dynamic_batching.default_queue_policy", db.default_queue_policy))
    for path, pol in policies:
        if pol.allow_timeout_override and pol.default_timeout_microseconds == 0:
            out.append(Finding("warning", f"{path}.allow_timeout_override",
                               "默认超时为 0 时，单个请求带的超时也不生效（只能缩短默认值）", SRC_UTILS))
        if pol.timeout_action == mc.ModelQueuePolicy.DELAY and pol.default_timeout_microseconds:
            out.append(Finding("note", f"{path}.timeout_action",
                               "DELAY 不丢请求，而是把超时请求挪到未超时请求之后：它可能被无限推迟，并不能防饥饿",
                               SRC_PROTO))
        if db.preserve_ordering and pol.timeout_action == mc.ModelQueuePolicy.DELAY and pol.default_timeout_microseconds:
            out.append(Finding("error", f"{path}.timeout_action",
                               "preserve_ordering 为 true 时队列策略不能用 DELAY", SRC_VALIDATE))
    if db.preserve_ordering and levels > 1:
        out.append(Finding("error", "dynamic_batching.preserve_ordering",
                           "preserve_ordering 为 true 时只允许一个优先级", SRC_VALIDATE))
    if db.max_queue_delay_microseconds and not (db.HasField("default_queue_policy") or db.priority_queue_policy):
        out.append(Finding("note", "dynamic_batching.max_queue_delay_microseconds",
                           f"{db.max_queue_delay_microseconds} µs 只限制为合批而扣住请求的时间；实例全忙时的排队不受它限制，"
                           "要给排队时间设上限得用 default_queue_policy 的超时", SRC_BATCHER))
    return out


def _repeated(f: FieldDescriptor) -> bool:
    rep = getattr(f, "is_repeated", None)
    return bool(rep) if rep is not None else f.label == FieldDescriptor.LABEL_REPEATED


#: Top-level fields in the order a reader expects them (the rest follow in field-number order).
_TOP_ORDER = ("name", "platform", "backend", "max_batch_size", "input", "output",
              "dynamic_batching", "sequence_batching", "instance_group",
              "model_transaction_policy", "parameters")


def _fields(msg: Any, top: bool) -> list[tuple[FieldDescriptor, Any]]:
    items = msg.ListFields()
    if top:
        rank = {n: i for i, n in enumerate(_TOP_ORDER)}
        items = sorted(items, key=lambda fv: (rank.get(fv[0].name, len(rank)), fv[0].number))
    return items


def _fmt_scalar(f: FieldDescriptor, v: Any) -> str:
    if f.type == FieldDescriptor.TYPE_ENUM:
        return f.enum_type.values_by_number[v].name
    if f.type == FieldDescriptor.TYPE_STRING:
        return '"' + str(v).replace('"', '\\"') + '"'
    if f.type == FieldDescriptor.TYPE_BOOL:
        return "true" if v else "false"
    return str(v)


def _note(path: str) -> str:
    clean = re.sub(r"\[[^\]]*\]", "", path)
    shared = clean.replace(".priority_queue_policy.", ".default_queue_policy.")  # a level's policy: same notes
    return FIELD_NOTES.get(clean) or FIELD_NOTES.get(shared, "")


def annotate(config: Any, width: int = 58) -> str:
    """The config re-printed in canonical text format, each field followed by its `# note`."""
    c = _as_config(config)
    lines: list[str] = []

    def emit(msg: Any, prefix: str, indent: int) -> None:
        pad = "  " * indent
        for f, value in _fields(msg, indent == 0):
            path = f"{prefix}.{f.name}" if prefix else f.name
            note = _note(path)
            if f.type == FieldDescriptor.TYPE_MESSAGE:
                if f.message_type.GetOptions().map_entry:
                    for k, v in sorted(value.items()):
                        key = f'"{k}"' if isinstance(k, str) else str(k)
                        lines.append(_with_note(f"{pad}{f.name} {{ key: {key} value {{", note, width))
                        if hasattr(v, "ListFields"):
                            emit(v, f"{path}[{k}]", indent + 1)
                        lines.append(f"{pad}}} }}")
                    continue
                items = list(value) if _repeated(f) else [value]
                for item in items:
                    if not item.ListFields():
                        lines.append(_with_note(f"{pad}{f.name} {{ }}", note + "（全部取默认值）", width))
                        continue
                    lines.append(_with_note(f"{pad}{f.name} {{", note, width))
                    emit(item, path, indent + 1)
                    lines.append(f"{pad}}}")
            elif _repeated(f):
                vals = ", ".join(_fmt_scalar(f, v) for v in value)
                lines.append(_with_note(f"{pad}{f.name}: [ {vals} ]", note, width))
            else:
                lines.append(_with_note(f"{pad}{f.name}: {_fmt_scalar(f, value)}", note, width))

    emit(c, "", 0)
    return "\n".join(lines)


def _with_note(code: str, note: str, width: int) -> str:
    return f"{code.ljust(width)}  # {note}" if note else code


def to_text(config: Any) -> str:
    """Canonical protobuf text of a config (what `parse_config` reads back unchanged)."""
    return text_format.MessageToString(_as_config(config))


def with_batcher(base_text: str, rule: Any, name: str | None = None) -> str:
    """``base_text`` (a model's config.pbtxt) with the batcher setting ``rule`` (a
    `batchlab.batching.dynamic.BatchRule`) written in, and ``name`` if given (comments not kept)."""
    return to_text(edit_config(base_text, rule.config_changes(name)))


def edit_config(config: Any, changes: Mapping[str, Any] | str, at: str = "") -> Any:
    """A copy of `config` (text or `ModelConfig`) with some fields replaced; the input is not modified.

    `changes`: a dict of dotted paths (from the message at `at`) to values — a list for repeated
    scalars, a dict or text for a message, {key: dict} for a map, None clears; a number indexes a
    repeated message (one past the end adds one) — or config text (a learner's block), parsed as
    fields of the message at `at` (which the config must have), each replacing that field whole.
    """
    msg = mc.ModelConfig()
    msg.CopyFrom(_as_config(config))
    base = _section(msg, at) if at else msg
    if isinstance(changes, str):
        block = _parse_into(changes, type(base)())
        for f, _ in block.ListFields():
            base.ClearField(f.name)
        base.MergeFrom(block)  # each field the block sets (an empty section too) replaces the config's
        return msg
    for path, value in dict(changes).items():
        target, f = _field(base, path)
        last = f.name
        if value is None:
            target.ClearField(last)
        elif f.type == FieldDescriptor.TYPE_MESSAGE:
            if f.message_type.GetOptions().map_entry:
                field_map = getattr(target, last)
                for k, v in dict(value).items():
                    entry = field_map[k]
                    entry.Clear()
                    _parse_into(_dict_text(v), entry)
            else:
                sub = getattr(target, last)
                sub.Clear()
                _parse_into(_dict_text(value), sub)
                sub.SetInParent()
        elif _repeated(f):
            rep = getattr(target, last)
            del rep[:]
            rep.extend(_enum(f, v) for v in value)
        else:
            setattr(target, last, _enum(f, value))
    return msg


def _field(msg: Any, path: str) -> tuple[Any, FieldDescriptor]:
    """(the message holding the last part of dotted `path`, that field's descriptor)."""
    parts = path.split(".")
    target = msg
    for part in parts[:-1]:
        if part.isdigit():  # an index into a repeated message; one past the end adds an entry
            if int(part) > len(target):
                raise ValueError(f"{path!r}: index {part} is past the end ({len(target)} entries)")
            target = target[int(part)] if int(part) < len(target) else target.add()
            continue
        if part not in target.DESCRIPTOR.fields_by_name:
            raise ValueError(f"{path!r}: {target.DESCRIPTOR.name} has no field {part!r}")
        target = getattr(target, part)
    f = target.DESCRIPTOR.fields_by_name.get(parts[-1])
    if f is None:
        raise ValueError(f"{path!r}: {target.DESCRIPTOR.name} has no field {parts[-1]!r}")
    return target, f


def _section(msg: Any, path: str) -> Any:
    """The sub-message at dotted `path`, which `msg` must already have."""
    target = msg
    for i, part in enumerate(path.split(".")):
        f = target.DESCRIPTOR.fields_by_name.get(part)
        if f is None or f.type != FieldDescriptor.TYPE_MESSAGE or _repeated(f):
            raise ValueError(f"{path!r}: {target.DESCRIPTOR.name} has no message field {part!r}")
        if not target.HasField(part):
            raise ValueError(f"the config has no {'.'.join(path.split('.')[:i + 1])} section")
        target = getattr(target, part)
    return target


def _enum(f: FieldDescriptor, v: Any) -> Any:
    if f.type == FieldDescriptor.TYPE_ENUM and isinstance(v, str):
        if v not in f.enum_type.values_by_name:
            raise ValueError(f"{f.name}: {v!r} is not one of {', '.join(f.enum_type.values_by_name)}")
        return f.enum_type.values_by_name[v].number
    return v


def _dict_text(d: Any) -> str:
    if isinstance(d, str):
        return d
    parts = []
    for k, v in dict(d).items():
        if isinstance(v, dict):
            parts.append(f"{k} {{ {_dict_text(v)} }}")
        elif isinstance(v, bool):
            parts.append(f"{k}: {'true' if v else 'false'}")
        elif isinstance(v, (list, tuple)):
            parts.append(f"{k}: [ {', '.join(str(x) for x in v)} ]")
        else:
            parts.append(f"{k}: {v}")
    return " ".join(parts)


def stage_model(dest: str | Path, name: str, config_text: str | None, source_model: str,
                repo: str | Path | None = None) -> Path:
    """Write model `name` into repository `dest` (returned): `source_model`'s folder `1/` from `repo`
    and `config_text` as given (a `name:` line added if missing; it may be deliberately wrong), or,
    with None, the source's own config renamed to `name`."""
    base = Path(repo) if repo is not None else MODEL_REPOSITORY
    src = base / source_model / "1"
    if not src.is_dir():
        have = sorted(d.parent.name for d in base.glob("*/1") if d.is_dir())
        raise ValueError(f"no model {source_model!r} with a version folder 1/ in {base} "
                         f"(has {', '.join(have) or 'none'})")
    if not re.fullmatch(r"[A-Za-z0-9_\-]+", name):
        raise ValueError(f"bad model name {name!r}")
    if config_text is None:
        own = base / source_model / "config.pbtxt"
        if not own.is_file():
            raise ValueError(f"model {source_model!r} in {base} has no config.pbtxt to copy")
        text = own.read_text(encoding="utf-8")
        text, n = re.subn(r'^(name\s*:\s*)"[^"]*"', rf'\g<1>"{name}"', text, count=1, flags=re.M)
        text = text if n else f'name: "{name}"\n' + text
    else:
        text = config_text if re.search(r"^\s*name\s*:", config_text, re.M) else f'name: "{name}"\n' + config_text
    target = Path(dest) / name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(src, target / "1", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (target / "config.pbtxt").write_text(text, encoding="utf-8")
    return Path(dest)


def summarize(config: Any) -> dict[str, Any]:
    """The batching-relevant facts of one config as a flat dict: name, scheduler
    (dynamic / sequence:direct / sequence:oldest / none), max_batch_size, delay_us, preferred,
    instances, decoupled, iterative, queue_policy (short text), priority_levels."""
    c = _as_config(config)
    sched = c.WhichOneof("scheduling_choice") or "none"
    delay = 0
    preferred: list[int] = []
    policy = ""
    levels = 0
    iterative = False
    if sched == "dynamic_batching":
        db = c.dynamic_batching
        delay, preferred, levels = db.max_queue_delay_microseconds, list(db.preferred_batch_size), db.priority_levels
        q = db.default_queue_policy  # all zero when not set
        parts = []
        if q.max_queue_size:
            parts.append(f"max_queue_size={q.max_queue_size}")
        if q.default_timeout_microseconds:
            parts.append(f"timeout={q.default_timeout_microseconds}us/{mc.ModelQueuePolicy.TimeoutAction.Name(q.timeout_action)}")
        policy = ", ".join(parts)
        sched = "dynamic"
    elif sched == "sequence_batching":
        sb = c.sequence_batching
        strat = sb.WhichOneof("strategy_choice") or "direct"
        iterative = sb.iterative_sequence
        if strat == "oldest":
            delay, preferred = sb.oldest.max_queue_delay_microseconds, list(sb.oldest.preferred_batch_size)
        else:
            delay = sb.direct.max_queue_delay_microseconds
        sched = f"sequence:{strat}"
    instances = sum(g.count or 1 for g in c.instance_group) if c.instance_group else 1
    return {"name": c.name, "scheduler": sched, "max_batch_size": c.max_batch_size, "delay_us": int(delay),
            "preferred": preferred, "instances": int(instances),
            "decoupled": bool(c.model_transaction_policy.decoupled), "iterative": bool(iterative),
            "queue_policy": policy, "priority_levels": int(levels)}
