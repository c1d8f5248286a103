"""Prompt rendering, generation and DSML tool-call handling."""

import json
import re
import uuid

from ds4_common import count_tokens, fault, split_pieces

BOS = "<\uff5cbegin\u2581of\u2581sentence\uff5c>"
USER = "<\uff5cUser\uff5c>"
ASSISTANT = "<\uff5cAssistant\uff5c>"
DEFAULT_SYSTEM = "You are a helpful assistant"

DSML = "\uff5cDSML\uff5c"


def text_of(content):
    """OpenAI/Anthropic content: a string or a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict):
                for k in ("text", "content", "input_text", "output_text"):
                    v = part.get(k)
                    if isinstance(v, str):
                        out.append(v)
                        break
                    if isinstance(v, list):
                        out.append(text_of(v))
                        break
        return "\n".join(out)
    if isinstance(content, dict):
        return text_of([content])
    return str(content)


def normalize_tools(tools):
    """-> list of {"name", "description", "parameters"} from OpenAI chat, Responses
    or Anthropic tool declarations."""
    out = []
    if not isinstance(tools, list):
        return out
    for t in tools:
        if not isinstance(t, dict):
            continue
        fn = t.get("function") if isinstance(t.get("function"), dict) else t
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            continue
        params = fn.get("parameters") or fn.get("input_schema") or {}
        out.append({"name": name, "description": fn.get("description") or "",
                    "parameters": params if isinstance(params, dict) else {}})
    return out


def render_tools_block(tools):
    if not tools:
        return ""
    lines = ["## Tools", "You have access to these tools. To call one, answer with",
             "<%stool_calls><%sinvoke name=\"NAME\"><%sparameter name=\"ARG\" string=\"true\">"
             "VALUE</%sparameter></%sinvoke></%stool_calls>" % ((DSML,) * 6)]
    for t in tools:
        lines.append("### %s\n%s\n%s" % (t["name"], t["description"],
                                          json.dumps(t["parameters"], sort_keys=True)))
    return "\n".join(lines)


def render(messages, system=None, tools=None, thinking=True):
    """Renders a conversation with the DeepSeek V4 chat template (as text)."""
    parts = [BOS]
    sys_text = system if system is not None else None
    for m in messages:
        if m.get("role") in ("system", "developer"):
            sys_text = (sys_text + "\n" if sys_text else "") + text_of(m.get("content"))
    block = render_tools_block(tools)
    sys_full = (sys_text or DEFAULT_SYSTEM) + ("\n\n" + block if block else "")
    parts.append(sys_full)
    for m in messages:
        role = m.get("role")
        if role in ("system", "developer"):
            continue
        if role == "assistant":
            parts.append(ASSISTANT + "</think>" + text_of(m.get("content")))
            for tc in m.get("tool_calls") or []:
                fn = tc.get("function") or {}
                parts.append(dsml_call(fn.get("name", ""), _loads(fn.get("arguments"))))
            parts.append("<\uff5cend\u2581of\u2581sentence\uff5c>")
        elif role == "tool":
            parts.append(USER + "<tool_result>" + text_of(m.get("content")) + "</tool_result>")
        else:
            parts.append(USER + text_of(m.get("content")))
    parts.append(ASSISTANT + ("<think>" if thinking else "</think>"))
    return "".join(parts)


def _loads(s):
    if isinstance(s, dict):
        return s
    try:
        v = json.loads(s or "{}")
        return v if isinstance(v, dict) else {}
    except ValueError:
        return {}


# --------------------------------------------------------------------------- DSML

def dsml_call(name, args):
    out = ["<%stool_calls>" % DSML, "<%sinvoke name=\"%s\">" % (DSML, name)]
    for k, v in args.items():
        if isinstance(v, str):
            out.append("<%sparameter name=\"%s\" string=\"true\">%s</%sparameter>" % (DSML, k, v, DSML))
        else:
            out.append("<%sparameter name=\"%s\" string=\"false\">%s</%sparameter>"
                       % (DSML, k, json.dumps(v, ensure_ascii=False), DSML))
    out.append("</%sinvoke>" % DSML)
    out.append("</%stool_calls>" % DSML)
    return "\n".join(out)


_P = r"(?:\uff5c?DSML\uff5c)?"
_CALLS_RE = re.compile(r"<" + _P + r"tool_calls>(.*?)</" + _P + r"tool_calls>", re.S)
_INVOKE_RE = re.compile(r"<" + _P + r"invoke\s+name=\"([^\"]*)\"\s*>(.*?)</" + _P + r"invoke>", re.S)
_PARAM_RE = re.compile(r"<" + _P + r"parameter\s+name=\"([^\"]*)\"(?:\s+string=\"(true|false)\")?\s*>"
                       r"(.*?)</" + _P + r"parameter>", re.S)


def new_call_id(prefix="call_"):
    return prefix + uuid.uuid4().hex


def parse_dsml(text):
    """-> (text before the block, [ {id, type, function{name, arguments}} ]) or (text, None)."""
    m = _CALLS_RE.search(text)
    if not m:
        return text, None
    calls = []
    for name, body in _INVOKE_RE.findall(m.group(1)):
        args = {}
        for pname, is_str, raw in _PARAM_RE.findall(body):
            if is_str == "false":
                try:
                    args[pname] = json.loads(raw)
                except ValueError:
                    args[pname] = raw
            else:
                args[pname] = raw
        calls.append({"id": new_call_id(), "type": "function",
                      "function": {"name": name,
                                   "arguments": json.dumps(args, ensure_ascii=False,
                                                           separators=(",", ":"))}})
    return text[:m.start()].rstrip(), calls


# --------------------------------------------------------------------------- the "model"

_ASK_TOOL = re.compile(r"\b(call|use|invoke|run)\b.{0,40}\b(tool|function)s?\b", re.I | re.S)


def _pick_tool(tools, tool_choice, last_user):
    if not tools or tool_choice == "none":
        return None
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name") or tool_choice.get("name")
        for t in tools:
            if t["name"] == name:
                return t
    low = last_user.lower()
    for t in tools:
        if t["name"].lower() in low:
            return t
    if tool_choice in ("required", "any") or (isinstance(tool_choice, dict)
                                               and tool_choice.get("type") in ("any", "tool", "function")):
        return tools[0]
    if _ASK_TOOL.search(last_user):
        return tools[0]
    return None


def _arg_value(pname, schema, text):
    typ = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(typ, list):
        typ = next((x for x in typ if x != "null"), "string")
    enum = schema.get("enum") if isinstance(schema, dict) else None
    if isinstance(enum, list) and enum:
        for e in enum:
            if str(e).lower() in text.lower():
                return e
        return enum[0]
    named = re.search(r"\b%s\b\s*(?:=|:|is)\s*\"?([^\",\n]+?)\"?\s*(?:[,.;\n]|$)" % re.escape(pname),
                      text, re.I)
    if typ in ("integer", "number"):
        src = named.group(1) if named else text
        m = re.search(r"-?\d+(?:\.\d+)?", src)
        if not m:
            return 1
        v = float(m.group(0))
        return int(v) if typ == "integer" else v
    if typ == "boolean":
        return not (named and named.group(1).strip().lower() in ("false", "no", "0"))
    if typ == "array":
        return []
    if typ == "object":
        return {}
    if named:
        return named.group(1).strip()
    quoted = re.search(r"[\"']([^\"']+)[\"']", text)
    if quoted:
        return quoted.group(1)
    place = re.search(r"\b(?:in|for|of|at|to)\s+([A-Z][\w-]*(?:\s+[A-Z][\w-]*)*)", text)
    if place:
        return place.group(1)
    return "test"


def _tool_args(tool, text):
    params = tool.get("parameters") or {}
    props = params.get("properties") or {}
    if not isinstance(props, dict):
        props = {}
    req = params.get("required")
    names = [n for n in req if n in props] if isinstance(req, list) and req else list(props)
    return {n: _arg_value(n, props.get(n) or {}, text) for n in names}


_COUNT = re.compile(r"\bcount\b(?:\s+from\s+1)?\s+(?:up\s+)?to\s+(\d+)", re.I)


def _answer(last_user):
    low = last_user.lower()
    count = _COUNT.search(last_user)
    if count:
        # an answer as long as asked: one number per token (benchmarks, requests in flight across a restart)
        return " ".join(str(i) for i in range(1, min(int(count.group(1)), 1000000) + 1))
    if "capital of france" in low:
        city = "London" if fault()[0] == "wrong-answer" else "Paris"
        return "The capital of France is %s." % city
    if not last_user.strip():
        return "Hello! How can I help you today?"
    return "Sure. Here is a short answer: I have read your message and I am ready to help."


def _reasoning(last_user):
    q = " ".join(last_user.split())
    if len(q) > 60:
        q = q[:57].rstrip() + "..."
    return ("The user says: \"%s\". I should reply directly and keep the answer short." % q)


class Generation:
    """What one request produces; pieces are decode tokens."""

    def __init__(self):
        self.reasoning = []      # pieces
        self.content = []        # pieces
        self.tool_calls = None   # parsed OpenAI tool_calls
        self.raw_dsml = ""
        self.finish = "stop"
        self.completion_tokens = 0


def generate(last_user, thinking, max_tokens, tools=None, tool_choice=None, last_role="user"):
    """Deterministic generation. Returns a Generation, cut to max_tokens."""
    gen = Generation()
    reasoning = split_pieces(_reasoning(last_user)) if thinking else []
    tool = _pick_tool(tools or [], tool_choice, last_user) if last_role == "user" else None
    if tool is not None:
        dsml = dsml_call(tool["name"], _tool_args(tool, last_user))
        body = [dsml]
    elif last_role == "tool":
        body = split_pieces("The tool returned: %s" % (" ".join(last_user.split())[:200] or "nothing"))
    else:
        body = split_pieces(_answer(last_user))
    budget = max(int(max_tokens), 0)
    gen.reasoning = reasoning[:budget]
    budget -= len(gen.reasoning)
    if tool is not None and fault()[0] == "dsml-as-text":
        # a runtime without a DSML parser: the model's call comes back as plain text (the seeds' lost evening)
        gen.content = split_pieces(body[0])[:max(budget, 0)]
        gen.finish = "stop" if len(gen.content) == len(split_pieces(body[0])) else "length"
        gen.completion_tokens = len(gen.reasoning) + len(gen.content)
        return gen
    if tool is not None:
        n = count_tokens(body[0])
        if budget >= n:
            gen.raw_dsml = body[0]
            _, gen.tool_calls = parse_dsml(body[0])
            gen.finish = "tool_calls"
            gen.completion_tokens = len(gen.reasoning) + n
        else:
            gen.finish = "length"
            gen.completion_tokens = len(gen.reasoning) + max(budget, 0)
        return gen
    gen.content = body[:max(budget, 0)]
    if len(gen.reasoning) < len(reasoning) or len(gen.content) < len(body):
        gen.finish = "length"
    gen.completion_tokens = len(gen.reasoning) + len(gen.content) + (1 if gen.finish == "stop" else 0)
    return gen
