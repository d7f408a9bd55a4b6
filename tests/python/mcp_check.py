#!/usr/bin/env python3
"""Drive `strata mcp` (or any server with the same seven tools) with the official Python MCP SDK.

Usage:
    python3 mcp_check.py [--timeout SECONDS] -- <server command> [args...]
    e.g. python3 mcp_check.py -- target/debug/strata mcp

Needs the `mcp` package from PyPI, major version 2 (`pip install 'mcp>=2.3,<3'`). It is written
against plain dicts (`model_dump(by_alias=True)`), so it also runs on mcp 1.x, whose objects
name the same fields in camelCase (`structuredContent`) where 2.x uses snake_case.

The server is started over stdio with this process's whole environment (the SDK would otherwise
pass only HOME, PATH and a few more) and its stderr goes to our stderr. It checks every tool, then
prints ONE JSON object on stdout: {"ok": true, ...summary...}, exit 0. On the first failed check it
prints {"ok": false, "failed": "<message>", ...what it had so far...} on stdout, the message on
stderr, and exits 1. Exit 2 is a usage error.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import uuid
from importlib import metadata
from typing import Any

try:
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.shared import exceptions as _mcp_exceptions
except ImportError as e:  # pragma: no cover
    print(f"mcp_check: cannot import the `mcp` package ({e}); pip install 'mcp>=2.3,<3'", file=sys.stderr)
    sys.exit(2)

# mcp 2.x calls it MCPError, 1.x McpError: a JSON-RPC error response to a request.
ProtocolError: type[BaseException] = getattr(_mcp_exceptions, "MCPError", None) or getattr(
    _mcp_exceptions, "McpError"
)

EXPECTED_TOOLS: dict[str, dict[str, list[str]]] = {
    # tool: {"required": [...], "optional": [...]} (argument names in the inputSchema)
    "list_knowledge": {"required": [], "optional": []},
    "get_knowledge": {
        "required": ["concerns"],
        "optional": ["project", "session", "task_context", "max_tokens", "idempotency_key"],
    },
    "start_session": {"required": [], "optional": ["session", "agent", "project", "task_context"]},
    "log_learning": {"required": ["session", "text"], "optional": ["concerns", "idempotency_key"]},
    "log_decision": {"required": ["session", "decision"], "optional": ["rationale", "idempotency_key"]},
    "log_outcome": {"required": ["session", "outcome"], "optional": ["detail", "idempotency_key"]},
    "get_context": {"required": ["task", "item", "reason"], "optional": ["level", "prompt_version", "session"]},
}


class CheckFailed(Exception):
    pass


def check(cond: Any, msg: str) -> None:
    if not cond:
        raise CheckFailed(msg)


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def typo_of(word: str, known: set[str]) -> str:
    """A close misspelling of `word` that is not itself a known concern."""
    # One edit away (Levenshtein distance 1), so any reasonable "did you mean" finds it.
    candidates = []
    if len(word) >= 4:
        candidates.append(word[:-1])  # drop the last letter
        candidates.append(word[:2] + word[2] * 2 + word[3:])  # double the third letter
    candidates.append(word + word[-1])  # double the last letter
    candidates.append(word + "x")
    for c in candidates:
        if c and c != word and c not in known:
            return c
    return word + "-typo"


class Checker:
    def __init__(self, session: ClientSession) -> None:
        self.s = session
        self.calls = 0
        self.summary: dict[str, Any] = {}

    async def call_raw(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """tools/call; returns the CallToolResult as a camelCase dict."""
        self.calls += 1
        try:
            res = await self.s.call_tool(name, args)
        except ProtocolError as e:
            if "connection closed" in str(e).lower():
                raise CheckFailed(f"{name}({json.dumps(args)}): the server closed the connection (did it exit?)") from e
            raise CheckFailed(
                f"{name}({json.dumps(args)}): got a JSON-RPC error instead of a tool result: {e}"
            ) from e
        except RuntimeError as e:
            # The SDK validates structuredContent against the tool's outputSchema (non-error results).
            raise CheckFailed(f"{name}({json.dumps(args)}): client-side check failed: {e}") from e
        return res.model_dump(by_alias=True, mode="json")

    @staticmethod
    def texts(name: str, res: dict[str, Any]) -> list[str]:
        content = res.get("content") or []
        check(isinstance(content, list), f"{name}: content is not a list: {content!r}")
        return [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]

    async def ok(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """A call that must succeed; returns structuredContent after checking the text copy."""
        res = await self.call_raw(name, args)
        texts = self.texts(name, res)
        check(
            not res.get("isError"),
            f"{name}({json.dumps(args)}): unexpected isError result: {' | '.join(texts) or res}",
        )
        sc = res.get("structuredContent")
        check(isinstance(sc, dict), f"{name}: structuredContent missing or not an object: {sc!r}")
        check(texts, f"{name}: no text content block next to structuredContent")
        try:
            parsed = json.loads(texts[0])
        except json.JSONDecodeError as e:
            raise CheckFailed(f"{name}: text content is not JSON ({e}): {texts[0][:200]!r}") from e
        check(parsed == sc, f"{name}: text content JSON differs from structuredContent: {texts[0][:300]!r}")
        return sc

    async def err(self, name: str, args: dict[str, Any], what: str) -> str:
        """A call that must come back as an isError result with a non-empty text message."""
        res = await self.call_raw(name, args)
        texts = self.texts(name, res)
        check(
            res.get("isError") is True,
            f"{what}: {name}({json.dumps(args)}) should be an isError result, got {json.dumps(res)[:300]}",
        )
        msg = "\n".join(texts).strip()
        check(msg, f"{what}: {name} isError result has no text message: {res}")
        return msg

    # ---------------------------------------------------------------- the checks

    async def run(self) -> None:
        init = await self.s.initialize()
        d = init.model_dump(by_alias=True, mode="json")
        self.summary["protocol_version"] = d.get("protocolVersion")
        self.summary["server_info"] = d.get("serverInfo")
        check((d.get("capabilities") or {}).get("tools") is not None, "server does not advertise the tools capability")

        await self.check_tool_list()
        listing = await self.check_list_knowledge()
        await self.check_get_knowledge(listing)
        await self.check_session_and_logs(listing)
        await self.check_errors(listing)

    async def check_tool_list(self) -> None:
        tools = [t.model_dump(by_alias=True, mode="json") for t in (await self.s.list_tools()).tools]
        by_name = {t["name"]: t for t in tools}
        self.summary["tools"] = sorted(by_name)
        missing = sorted(set(EXPECTED_TOOLS) - set(by_name))
        check(not missing, f"tools/list lacks {missing}; it has {sorted(by_name)}")
        for name, spec in EXPECTED_TOOLS.items():
            t = by_name[name]
            ins, outs = t.get("inputSchema"), t.get("outputSchema")
            check(isinstance(ins, dict) and ins.get("type") == "object", f"{name}: bad inputSchema {ins!r}")
            check(isinstance(outs, dict) and outs.get("type") == "object", f"{name}: no object outputSchema: {outs!r}")
            check(isinstance(t.get("description"), str) and t["description"].strip(), f"{name}: no description")
            props = set((ins.get("properties") or {}).keys())
            want = set(spec["required"]) | set(spec["optional"])
            check(want <= props, f"{name}: inputSchema lacks properties {sorted(want - props)}; has {sorted(props)}")
            extra_required = set(ins.get("required") or []) - set(spec["required"])
            check(not extra_required, f"{name}: inputSchema requires {sorted(extra_required)}, which should be optional")
            missing_required = set(spec["required"]) - set(ins.get("required") or [])
            check(not missing_required, f"{name}: inputSchema does not mark {sorted(missing_required)} as required")

    async def check_list_knowledge(self) -> dict[str, Any]:
        lk = await self.ok("list_knowledge", {})
        chunks, concerns, projects = lk.get("chunks"), lk.get("concerns"), lk.get("projects")
        check(isinstance(chunks, list), f"list_knowledge: chunks is not a list: {chunks!r}")
        check(is_str_list(concerns), f"list_knowledge: concerns is not a list of strings: {concerns!r}")
        check(is_str_list(projects), f"list_knowledge: projects is not a list of strings: {projects!r}")
        check(len(chunks) >= 1, "list_knowledge returned no chunks: the server needs at least one to be checked")
        slugs = set()
        for c in chunks:
            check(isinstance(c, dict), f"list_knowledge: chunk is not an object: {c!r}")
            for k in ("slug", "title"):
                check(isinstance(c.get(k), str) and c[k], f"list_knowledge: chunk {k} missing/empty: {c}")
            for k in ("concerns", "project_scope"):
                check(is_str_list(c.get(k)), f"list_knowledge: chunk {c['slug']}: {k} not a list of strings")
            for k in ("token_estimate", "version"):
                check(is_int(c.get(k)) and c[k] >= 0, f"list_knowledge: chunk {c['slug']}: {k} not an int >= 0")
            check(c["slug"] not in slugs, f"list_knowledge: duplicate slug {c['slug']}")
            slugs.add(c["slug"])
            unknown = set(c["concerns"]) - set(concerns)
            check(not unknown, f"list_knowledge: chunk {c['slug']} has concerns {sorted(unknown)} not in `concerns`")
            unknown = set(c["project_scope"]) - set(projects)
            check(not unknown, f"list_knowledge: chunk {c['slug']} has scope {sorted(unknown)} not in `projects`")
        self.summary["chunks"] = len(chunks)
        self.summary["concerns"] = len(concerns)
        self.summary["projects"] = len(projects)
        return lk

    def pick_request(self, lk: dict[str, Any]) -> tuple[list[str], str | None]:
        """A project that scopes some chunk, that chunk's first concern, and if possible a second
        concern from an unscoped chunk, so that both filters are exercised."""
        chunks = lk["chunks"]
        scoped = [c for c in chunks if c["project_scope"] and c["concerns"]]
        with_concerns = [c for c in chunks if c["concerns"]]
        check(with_concerns, "list_knowledge: no chunk has any concern")
        if scoped:
            project = scoped[0]["project_scope"][0]
            first = scoped[0]["concerns"][0]
        else:
            project = lk["projects"][0] if lk["projects"] else None
            first = with_concerns[0]["concerns"][0]
        wanted = [first]
        for c in chunks:
            if not c["project_scope"]:
                extra = [x for x in c["concerns"] if x not in wanted]
                if extra:
                    wanted.append(extra[0])
                    break
        return wanted, project

    @staticmethod
    def expected_slugs(lk: dict[str, Any], concerns: list[str], project: str | None) -> list[str]:
        return sorted(
            c["slug"]
            for c in lk["chunks"]
            if set(c["concerns"]) & set(concerns)
            and (not c["project_scope"] or (project is not None and project in c["project_scope"]))
        )

    def check_knowledge_result(
        self, gk: dict[str, Any], lk: dict[str, Any], concerns: list[str], project: str | None, label: str
    ) -> list[str]:
        chunks, omitted = gk.get("chunks"), gk.get("omitted")
        check(isinstance(chunks, list), f"{label}: chunks is not a list")
        check(is_str_list(omitted), f"{label}: omitted is not a list of strings: {omitted!r}")
        check(is_int(gk.get("total_tokens")), f"{label}: total_tokens is not an int: {gk.get('total_tokens')!r}")
        check(is_int(gk.get("logged_at")), f"{label}: logged_at is not an int: {gk.get('logged_at')!r}")
        meta = {c["slug"]: c for c in lk["chunks"]}
        for c in chunks:
            check(isinstance(c, dict) and isinstance(c.get("slug"), str), f"{label}: bad chunk {c!r}")
            slug = c["slug"]
            check(isinstance(c.get("content"), str), f"{label}: chunk {slug}: content is not a string")
            check(isinstance(c.get("hash"), str) and c["hash"], f"{label}: chunk {slug}: hash missing/empty")
            check(is_int(c.get("tokens")) and c["tokens"] >= 0, f"{label}: chunk {slug}: tokens not an int >= 0")
            check(is_int(c.get("version")), f"{label}: chunk {slug}: version is not an int")
            check(is_str_list(c.get("concerns")) and is_str_list(c.get("project_scope")),
                  f"{label}: chunk {slug}: concerns/project_scope not lists of strings")
            check(set(c["concerns"]) & set(concerns),
                  f"{label}: chunk {slug} has concerns {c['concerns']}, none of the requested {concerns}")
            check(not c["project_scope"] or (project is not None and project in c["project_scope"]),
                  f"{label}: chunk {slug} has scope {c['project_scope']}, which is not empty and lacks {project!r}")
            check(slug in meta, f"{label}: chunk {slug} is not in list_knowledge")
            for k in ("title", "concerns", "project_scope", "version"):
                check(c[k] == meta[slug][k], f"{label}: chunk {slug}: {k} {c[k]!r} != list_knowledge's {meta[slug][k]!r}")
        slugs = [c["slug"] for c in chunks]
        check(slugs == sorted(slugs), f"{label}: chunks not sorted by slug: {slugs}")
        check(len(set(slugs)) == len(slugs), f"{label}: duplicate chunks: {slugs}")
        total = sum(c["tokens"] for c in chunks)
        check(gk["total_tokens"] == total, f"{label}: total_tokens {gk['total_tokens']} != sum of tokens {total}")
        check(not set(slugs) & set(omitted), f"{label}: slugs both returned and omitted: {set(slugs) & set(omitted)}")
        return slugs

    async def check_get_knowledge(self, lk: dict[str, Any]) -> None:
        concerns, project = self.pick_request(lk)
        args: dict[str, Any] = {"concerns": concerns}
        if project is not None:
            args["project"] = project
        self.summary["request"] = args
        gk = await self.ok("get_knowledge", args)
        slugs = self.check_knowledge_result(gk, lk, concerns, project, "get_knowledge")
        want = self.expected_slugs(lk, concerns, project)
        got = sorted(set(slugs) | set(gk["omitted"]))
        check(got == want, f"get_knowledge{json.dumps(args)}: returned+omitted {got}, but list_knowledge implies {want}")
        check(slugs, f"get_knowledge{json.dumps(args)} returned no chunks (omitted {gk['omitted']})")
        self.summary["returned"] = slugs
        self.full = gk

        # A budget that fits the largest single chunk: whatever comes back must fit it and what
        # was left out must be listed in `omitted`.
        budget = max(c["tokens"] for c in gk["chunks"])
        gb = await self.ok("get_knowledge", {**args, "max_tokens": budget})
        bslugs = self.check_knowledge_result(gb, lk, concerns, project, f"get_knowledge(max_tokens={budget})")
        check(gb["total_tokens"] <= budget, f"get_knowledge(max_tokens={budget}): total_tokens {gb['total_tokens']} over budget")
        check(bslugs, f"get_knowledge(max_tokens={budget}): returned nothing though the largest chunk fits")
        check(sorted(set(bslugs) | set(gb["omitted"])) == want,
              f"get_knowledge(max_tokens={budget}): returned {bslugs} + omitted {gb['omitted']} != {want}")

    async def check_session_and_logs(self, lk: dict[str, Any]) -> None:
        run = uuid.uuid4().hex[:10]
        sid = f"mcp-check-{run}"
        project = self.summary["request"].get("project")
        start_args = {"session": sid, "agent": "mcp_check.py", "task_context": "checking the MCP server"}
        if project is not None:
            start_args["project"] = project
        st = await self.ok("start_session", start_args)
        check(st.get("session") == sid and st.get("started") is True,
              f"start_session({sid}): expected session={sid}, started=true; got {st}")
        again = await self.ok("start_session", start_args)
        check(again.get("session") == sid and again.get("started") is False,
              f"start_session({sid}) again: expected started=false; got {again}")
        anon = await self.ok("start_session", {"agent": "mcp_check.py"})
        check(isinstance(anon.get("session"), str) and anon["session"] and anon["session"] != sid
              and anon.get("started") is True,
              f"start_session() without an id: expected a new non-empty id with started=true; got {anon}")
        self.summary["session"] = sid

        req = self.summary["request"]
        gk_args = {**req, "session": sid, "task_context": "mcp_check", "idempotency_key": f"gk-{run}"}
        gk = await self.ok("get_knowledge", gk_args)
        slugs = self.check_knowledge_result(gk, lk, req["concerns"], req.get("project"), "get_knowledge(session)")
        check(slugs == self.summary["returned"],
              f"get_knowledge with a session returned {slugs}, without one {self.summary['returned']}")
        gk2 = await self.ok("get_knowledge", gk_args)
        # The retry answers the first serve, marked as a duplicate (as the log tools do).
        same = {k: v for k, v in gk2.items() if k != "duplicate"} == {k: v for k, v in gk.items() if k != "duplicate"}
        check(same and gk2.get("duplicate") is True and gk.get("duplicate") is False,
              f"get_knowledge retried with the same idempotency_key: expected the first answer with duplicate=true; "
              f"got {gk2} after {gk}")
        self.summary["logged_at"] = gk["logged_at"]

        logs = [
            ("log_learning", {"session": sid, "text": "mcp_check learned a thing",
                              "concerns": req["concerns"][:1]}),
            ("log_decision", {"session": sid, "decision": "mcp_check decided", "rationale": "because"}),
            ("log_outcome", {"session": sid, "outcome": "success", "detail": "all checks so far passed"}),
        ]
        seqs = []
        for i, (tool, args) in enumerate(logs):
            args = {**args, "idempotency_key": f"{tool}-{run}-{i}"}
            first = await self.ok(tool, args)
            check(is_int(first.get("seq")) and first.get("duplicate") is False,
                  f"{tool}: expected {{seq:int, duplicate:false}}, got {first}")
            retry = await self.ok(tool, args)
            check(retry.get("seq") == first["seq"] and retry.get("duplicate") is True,
                  f"{tool} retried with the same idempotency_key: expected seq={first['seq']}, duplicate=true; got {retry}")
            seqs.append(first["seq"])
        # Without a key, the same call is a new entry.
        fresh = await self.ok("log_learning", {"session": sid, "text": "mcp_check learned another thing"})
        check(is_int(fresh.get("seq")) and fresh.get("duplicate") is False, f"log_learning without a key: got {fresh}")
        seqs.append(fresh["seq"])
        check(all(a < b for a, b in zip(seqs, seqs[1:])), f"log seqs do not increase: {seqs}")
        # logged_at and seq are both journal sequence numbers: the serve came first.
        check(gk["logged_at"] < seqs[0], f"get_knowledge logged_at {gk['logged_at']} is not before the first log seq {seqs[0]}")
        self.summary["seqs"] = seqs

    async def check_errors(self, lk: dict[str, Any]) -> None:
        known = set(lk["concerns"])
        # The first concern, preferring one long enough that a typo of it is clearly a typo.
        pool = lk["concerns"] or lk["chunks"][0]["concerns"]
        first = next((c for c in pool if len(c) >= 4), pool[0])
        errors: dict[str, str] = {}
        errors["empty_concerns"] = await self.err("get_knowledge", {"concerns": []}, "empty concerns")
        typo = typo_of(first, known)
        msg = await self.err("get_knowledge", {"concerns": [typo]}, f"unknown concern {typo!r}")
        # As a whole word, so that the echoed typo ("cii" for "ci") does not count as a suggestion.
        check(re.search(r"(?<![\w-])" + re.escape(first) + r"(?![\w-])", msg),
              f"unknown concern {typo!r}: the error should suggest {first!r}; it says {msg!r}")
        errors["unknown_concern"] = msg
        bad_project = f"no-such-project-{uuid.uuid4().hex[:6]}"
        errors["unknown_project"] = await self.err(
            "get_knowledge", {"concerns": [first], "project": bad_project}, f"unknown project {bad_project!r}")
        errors["missing_concerns"] = await self.err("get_knowledge", {}, "missing required argument concerns")
        errors["missing_text"] = await self.err(
            "log_learning", {"session": self.summary["session"]}, "missing required argument text")
        errors["bad_outcome"] = await self.err(
            "log_outcome", {"session": self.summary["session"], "outcome": "maybe"}, "outcome outside the enum")
        self.summary["errors"] = {k: v[:200] for k, v in errors.items()}

        # The server must still answer, and with the same knowledge.
        again = await self.ok("list_knowledge", {})
        check(again == lk, "list_knowledge after the error cases differs from the first call")
        gk = await self.ok("get_knowledge", self.summary["request"])
        strip = lambda r: {k: v for k, v in r.items() if k != "logged_at"}  # each serve is a new event
        check(strip(gk) == strip(self.full), "get_knowledge after the error cases differs from the first call")
        check(gk["logged_at"] > self.full["logged_at"], "a later serve must be logged at a later sequence")


async def amain(cmd: list[str], timeout: float) -> dict[str, Any]:
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    checker = None
    try:
        with anyio.fail_after(timeout):
            async with stdio_client(params) as (read, write):
                async with ClientSession(read, write) as session:
                    checker = Checker(session)
                    await checker.run()
    except TimeoutError as e:
        raise CheckFailed(f"timed out after {timeout}s") from e
    except CheckFailed:
        raise
    except Exception as e:  # connection closed, server crashed, bad JSON, ...
        # anyio may wrap a CheckFailed raised inside the task groups in an ExceptionGroup.
        inner = _find(e, CheckFailed)
        if inner is not None:
            raise inner from None
        raise CheckFailed(f"MCP session failed: {type(e).__name__}: {e}") from e
    finally:
        if checker is not None:
            amain.summary = checker.summary  # type: ignore[attr-defined]
            amain.calls = checker.calls  # type: ignore[attr-defined]
    return checker.summary


def _find(e: BaseException, kind: type[BaseException]) -> BaseException | None:
    if isinstance(e, kind):
        return e
    for sub in getattr(e, "exceptions", ()) or ():
        found = _find(sub, kind)
        if found is not None:
            return found
    return None


def main() -> int:
    argv = sys.argv[1:]
    if "--" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    i = argv.index("--")
    ap = argparse.ArgumentParser(prog="mcp_check.py")
    ap.add_argument("--timeout", type=float, default=120.0, help="whole-run timeout in seconds (default 120)")
    opts = ap.parse_args(argv[:i])
    cmd = argv[i + 1 :]
    if not cmd:
        print("mcp_check: no server command after --", file=sys.stderr)
        return 2
    try:
        version = metadata.version("mcp")
    except metadata.PackageNotFoundError:
        version = "unknown"
    out: dict[str, Any] = {"ok": False, "client": "python-mcp", "mcp_version": version, "server_cmd": cmd}
    try:
        summary = anyio.run(amain, cmd, opts.timeout)
        out.update(summary)
        out["ok"] = True
        out["tool_calls"] = getattr(amain, "calls", None)
        print(json.dumps(out, sort_keys=True))
        return 0
    except CheckFailed as e:
        out.update(getattr(amain, "summary", {}))
        out["tool_calls"] = getattr(amain, "calls", None)
        out["failed"] = str(e)
        print(json.dumps(out, sort_keys=True))
        print(f"mcp_check: FAILED: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
